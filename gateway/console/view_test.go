package console

import (
	"strings"
	"testing"
)

func TestPrettyJSONKeepsOrderAndMasksSecrets(t *testing.T) {
	t.Parallel()
	got, ok := prettyJSON([]byte(`{"z":1,"a":[true,null,{"client_secret":{"x":1},"n":1.50}],"password":"p","e":{},"l":[],"h":"<b>"}`))
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
	if !ok || string(got) != want {
		t.Errorf("prettyJSON = %v\n%s\nwant\n%s", ok, got, want)
	}
	for _, notJSON := range []string{"", "<b>hi</b>", `{"a":1} {"b":2}`, `{"a":`} {
		if _, ok := prettyJSON([]byte(notJSON)); ok {
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
