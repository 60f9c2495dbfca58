package problem_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/idemgate/idemgate/problem"
)

var errGone = errors.New("gone")

// TestWriterAnswersFromItsTable: a carried sentinel gets its row's status,
// type and title, the carrier's detail, fields, key and Retry-After; an
// error no row matches is a 500 that says nothing of it.
func TestWriterAnswersFromItsTable(t *testing.T) {
	t.Parallel()
	pw := problem.Writer{
		Base:        "https://example.com/p/",
		Table:       problem.Table{{Err: errGone, Status: http.StatusGone, Slug: "gone", Title: "Gone", DocURL: "https://example.com/gone"}},
		Occurrence:  func(*http.Request) (string, string) { return "r1", "urn:example:r1" },
		Unexplained: "try later",
	}
	tests := []struct {
		name   string
		err    error
		status int
		want   string
		header http.Header
	}{
		{"carried", &problem.Error{Err: errGone, Detail: "job j1 is gone", Key: "k1", RetryAfter: 1500 * time.Millisecond,
			Fields: []problem.FieldFault{{Field: "id", Message: "unknown"}}, Cause: errors.New("secret")}, http.StatusGone,
			`{"type":"https://example.com/p/gone","title":"Gone","status":410,"detail":"job j1 is gone","instance":"urn:example:r1","request_id":"r1","retryable":false,"idempotency_key":"k1","documentation":"https://example.com/gone","errors":[{"field":"id","message":"unknown"}]}` + "\n",
			http.Header{"Retry-After": {"2"}, "Link": {`<https://example.com/gone>; rel="describedby"; type="text/html"`}}},
		{"bare sentinel", errGone, http.StatusGone,
			`{"type":"https://example.com/p/gone","title":"Gone","status":410,"detail":"Gone","instance":"urn:example:r1","request_id":"r1","retryable":false,"documentation":"https://example.com/gone"}` + "\n", nil},
		{"unknown", &problem.Error{Err: errors.New("secret"), Detail: "secret detail"}, http.StatusInternalServerError,
			`{"type":"https://example.com/p/internal","title":"Internal error","status":500,"detail":"try later","instance":"urn:example:r1","request_id":"r1","retryable":false}` + "\n", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := httptest.NewRecorder()
			pw.Write(w, httptest.NewRequest(http.MethodGet, "/", nil), tc.err)
			if w.Code != tc.status || w.Body.String() != tc.want {
				t.Fatalf("%d %s\nwant %d %s", w.Code, w.Body, tc.status, tc.want)
			}
			if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
				t.Errorf("Content-Type %q", ct)
			}
			for k, v := range tc.header {
				if got := w.Header().Get(k); got != v[0] {
					t.Errorf("%s %q, want %q", k, got, v[0])
				}
			}
		})
	}
}

// TestWriterNamesTheKeyItIsGiven: Key names the key of a problem whose
// error carries none, and the error's own key comes first.
func TestWriterNamesTheKeyItIsGiven(t *testing.T) {
	t.Parallel()
	pw := problem.Writer{
		Table: problem.Table{{Err: errGone, Status: http.StatusGone, Slug: "gone", Title: "Gone"}},
		Key:   func(*http.Request, error) (string, bool) { return "from-claim", true },
	}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{errGone, "from-claim"},
		{&problem.Error{Err: errGone, Key: "own"}, "own"},
	} {
		w := httptest.NewRecorder()
		pw.Write(w, httptest.NewRequest(http.MethodGet, "/", nil), tc.err)
		var doc struct {
			Key      *string `json:"idempotency_key"`
			Instance string  `json:"instance"`
			Type     string  `json:"type"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &doc); err != nil {
			t.Fatal(err)
		}
		if doc.Key == nil || *doc.Key != tc.want {
			t.Errorf("%v: idempotency_key %v, want %q", tc.err, doc.Key, tc.want)
		}
		if doc.Type != problem.DefaultBase+"gone" || len(doc.Instance) != len("urn:uuid:")+36 {
			t.Errorf("type %q instance %q; want the default base and a fresh urn:uuid:", doc.Type, doc.Instance)
		}
	}
}

// TestErrorMatchesReasonAndCause: errors.Is finds both the sentinel and
// the cause; the message names the cause, else the detail.
func TestErrorMatchesReasonAndCause(t *testing.T) {
	t.Parallel()
	cause := errors.New("disk full")
	err := error(&problem.Error{Err: errGone, Detail: "public", Cause: cause})
	if !errors.Is(err, errGone) || !errors.Is(err, cause) {
		t.Fatalf("%v does not match its reason and its cause", err)
	}
	if err.Error() != "gone: disk full" {
		t.Errorf("Error() %q", err.Error())
	}
	if got := (&problem.Error{Err: errGone, Detail: "public"}).Error(); got != "gone: public" {
		t.Errorf("Error() %q", got)
	}
}

// TestRetryable: a status that means "not processed" or a pending problem
// may be sent again; any other may not.
func TestRetryable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		p    problem.Type
		want bool
	}{
		{problem.Type{Status: 503}, true},
		{problem.Type{Status: 429}, true},
		{problem.Type{Status: 409}, false},
		{problem.Type{Status: 409, Pending: true}, true},
		{problem.Type{Status: 500}, false},
	} {
		if got := tc.p.Retryable(); got != tc.want {
			t.Errorf("%+v: Retryable %v, want %v", tc.p, got, tc.want)
		}
	}
}
