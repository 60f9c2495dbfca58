package console

import (
	"strings"
	"testing"
	"time"
)

func TestPrettyJSONKeepsOrderAndMasksSecrets(t *testing.T) {
	t.Parallel()
	got, capped, ok := prettyJSON([]byte(`{"z":1,"a":[true,null,{"client_secret":{"x":1},"n":1.50}],"password":"p","e":{},"l":[],"h":"<b>"}`), MaxBodyPreview)
	want := `{
  "z": 1,
  "a": [
    true,
    null,
    {
      "client_secret": "•••• (hidden)",
      "n": 1.50
    }
  ],
  "password": "•••• (hidden)",
  "e": {},
  "l": [],
  "h": "<b>"
}`
	if !ok || capped || string(got) != want {
		t.Errorf("prettyJSON = %v %v\n%s\nwant\n%s", ok, capped, got, want)
	}
	for _, notJSON := range []string{"", "<b>hi</b>", `{"a":1} {"b":2}`, `{"a":`} {
		if _, _, ok := prettyJSON([]byte(notJSON), MaxBodyPreview); ok {
			t.Errorf("prettyJSON(%q) ok, want not JSON", notJSON)
		}
	}
}

func TestBodyPreviewIsCapped(t *testing.T) {
	t.Parallel()
	body := strings.Repeat("é", MaxBodyPreview) // two bytes each
	v := viewBody([]byte(body), false)
	if !v.Capped || v.JSON || v.Binary || v.Size != len(body) || len(v.Text) > MaxBodyPreview || !strings.HasPrefix(body, v.Text) {
		t.Errorf("capped preview: capped %v json %v binary %v size %d, %d bytes shown", v.Capped, v.JSON, v.Binary, v.Size, len(v.Text))
	}
	if v := viewBody([]byte{0xff, 'a'}, false); !v.Binary || v.Text != "\uFFFDa" {
		t.Errorf("binary body: %+v", v)
	}
}

// Finding 1: a document nested 10,000 deep is shown in about its own
// size, not in the square of its depth (a 200 MB page before), and a
// large one is cut at the preview's cap while it is written.
func TestPrettyJSONWorkIsBounded(t *testing.T) {
	t.Parallel()
	for _, depth := range []int{1000, 10000} {
		doc := []byte(strings.Repeat(`{"a":[`, depth/2) + "1" + strings.Repeat("]}", depth/2))
		v := viewBody(doc, false)
		// Each indented level adds a line break and its indentation
		// once on the way in and once on the way out.
		bound := len(doc) + 2*maxIndent*(2*maxIndent+2) + 2*depth
		if !v.JSON || v.Capped || len(v.Text) > bound {
			t.Errorf("%d deep, %d bytes: json %v capped %v, %d bytes shown, want at most %d", depth, len(doc), v.JSON, v.Capped, len(v.Text), bound)
		}
		if strings.Count(v.Text, "\n") > 2*maxIndent+2 {
			t.Errorf("%d deep: %d lines, want levels past %d on one line", depth, strings.Count(v.Text, "\n")+1, maxIndent)
		}
	}
	wide := []byte("[" + strings.Repeat(`{"sku":"abc","n":[1,2,3]},`, 40000) + "1]")
	_, capped, ok := prettyJSON(wide, MaxBodyPreview)
	if !ok || !capped {
		t.Errorf("a %d-byte document: ok %v capped %v, want it cut", len(wide), ok, capped)
	}
	if v := viewBody(wide, false); !v.Capped || len(v.Text) > MaxBodyPreview {
		t.Errorf("a %d-byte document: capped %v, %d bytes shown", len(wide), v.Capped, len(v.Text))
	}
}

func BenchmarkPrettyJSONDeep(b *testing.B) {
	doc := []byte(strings.Repeat("[", 10000) + strings.Repeat("]", 10000))
	b.ReportAllocs()
	for b.Loop() {
		_ = viewBody(doc, false)
	}
}

// Durations read as people say them: "1m ago", not "1m0s ago".
func TestAgo(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for d, want := range map[time.Duration]string{
		0:                             "0s ago",
		45 * time.Second:              "45s ago",
		time.Minute:                   "1m ago",
		time.Minute + 5*time.Second:   "1m 5s ago",
		2*time.Hour + 10*time.Minute:  "2h 10m ago",
		3 * time.Hour:                 "3h ago",
		76*time.Hour + 30*time.Minute: "3d 4h ago",
		-time.Second:                  "0s ago",
	} {
		if got := ago(now, now.Add(-d)); got != want {
			t.Errorf("ago(%v) = %q, want %q", d, got, want)
		}
	}
}
