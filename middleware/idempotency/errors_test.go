package idempotency_test

import (
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/middleware/idempotency/memstore"
	"github.com/idemgate/idemgate/problem"
)

const draft = idempotency.DraftURL

// TestProblemRows pins the decision of every row of the middleware's
// table: whether the same request may be sent again, and the section of
// the draft the refusal is about.
func TestProblemRows(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err       error
		status    int
		retryable bool
		doc       string
	}{
		{idempotency.ErrKeyMissing, 400, false, draft + "#section-2.1"},
		{idempotency.ErrKeyInvalid, 400, false, draft + "#section-2.1"},
		{idempotency.ErrKeyReused, 422, false, draft + "#section-2.2"},
		{idempotency.ErrKeyInUse, 409, true, draft + "#section-2.6"},
		{idempotency.ErrOutcomeUnknown, 409, false, draft + "#section-2.6"},
		{idempotency.ErrRequestTooLarge, 413, false, ""},
		{idempotency.ErrStoreUnavailable, 503, true, ""},
	}
	for _, tc := range tests {
		p, ok := idempotency.Refusals().Lookup(&problem.Error{Err: tc.err})
		if !ok || p.Status != tc.status {
			t.Errorf("%v: %+v, want status %d", tc.err, p, tc.status)
			continue
		}
		if p.Retryable() != tc.retryable || p.Documentation() != tc.doc {
			t.Errorf("%s: retryable %v, documentation %q; want %v, %q", p.Slug, p.Retryable(), p.Documentation(), tc.retryable, tc.doc)
		}
	}
}

// problemDoc is what DefaultErrorHandler writes.
type problemDoc struct {
	Type           string `json:"type"`
	Status         int    `json:"status"`
	Instance       string `json:"instance"`
	Retryable      *bool  `json:"retryable"`
	IdempotencyKey string `json:"idempotency_key"`
	Documentation  string `json:"documentation"`
}

var uuidURN = regexp.MustCompile(`^urn:uuid:[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// TestDefaultErrorHandlerDocuments: every refusal a client can act on
// says whether to retry, which key it concerns, which occurrence it is,
// and where the draft explains it (in the body and in Link).
func TestDefaultErrorHandlerDocuments(t *testing.T) {
	t.Parallel()
	h := &counter{}
	started, release, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
	srv := newMW(t, memstore.New(), idempotency.Config{MaxRequestBytes: 64}).Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Idempotency-Key") == "running" {
			close(started)
			<-release
		}
		h.ServeHTTP(w, r)
	}))
	do(srv, call{key: "used", body: `{"amount":1}`})
	go func() {
		defer close(done)
		do(srv, call{key: "running"})
	}()
	t.Cleanup(func() { close(release); <-done })
	<-started // the original holds its claim

	tests := []struct {
		name      string
		h         http.Handler
		c         call
		status    int
		retryable bool
		key, doc  string
	}{
		{"missing", srv, call{}, 400, false, "", draft + "#section-2.1"},
		{"invalid", srv, call{key: "a b"}, 400, false, "", draft + "#section-2.1"},
		{"reused", srv, call{key: `"used"`, body: `{"amount":2}`}, 422, false, "used", draft + "#section-2.2"},
		{"in use", srv, call{key: "running"}, 409, true, "running", draft + "#section-2.6"},
		{"too large", srv, call{key: "big", body: `{"pad":"` + strings.Repeat("x", 100) + `"}`}, 413, false, "big", ""},
		{"store down", newMW(t, failingStore{}, idempotency.Config{}).Wrap(h), call{key: "k"}, 503, true, "k", ""},
	}
	seen := map[string]bool{}
	for _, tc := range tests {
		w := do(tc.h, tc.c)
		var p problemDoc
		if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || w.Code != tc.status || p.Status != tc.status {
			t.Errorf("%s: %d %s, want %d", tc.name, w.Code, w.Body, tc.status)
			continue
		}
		if p.Retryable == nil || *p.Retryable != tc.retryable {
			t.Errorf("%s: retryable %v, want %v", tc.name, p.Retryable, tc.retryable)
		}
		if p.IdempotencyKey != tc.key {
			t.Errorf("%s: idempotency_key %q, want %q", tc.name, p.IdempotencyKey, tc.key)
		}
		if p.Documentation != tc.doc {
			t.Errorf("%s: documentation %q, want %q", tc.name, p.Documentation, tc.doc)
		}
		wantLink := ""
		if tc.doc != "" {
			wantLink = "<" + tc.doc + `>; rel="describedby"; type="text/html"`
		}
		if got := w.Header().Get("Link"); got != wantLink {
			t.Errorf("%s: Link %q, want %q", tc.name, got, wantLink)
		}
		if !uuidURN.MatchString(p.Instance) || seen[p.Instance] {
			t.Errorf("%s: instance %q, want a fresh urn:uuid: for each occurrence", tc.name, p.Instance)
		}
		seen[p.Instance] = true
	}
}

// TestReplayMarkers: a replay carries Idempotent-Replayed and
// X-Idempotent-Replayed, and neither is stored from the upstream's own
// answer, so a first execution is never marked a replay by its record.
func TestReplayMarkers(t *testing.T) {
	t.Parallel()
	store := memstore.New()
	srv := newMW(t, store, idempotency.Config{}).Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(idempotency.HeaderReplayed, "true") // an upstream that dedupes by the forwarded key
		w.Header().Set(idempotency.HeaderReplayedX, "true")
		w.WriteHeader(http.StatusCreated)
	}))
	first := do(srv, call{key: "k"})
	rec, err := store.Get(t.Context(), idempotency.Scope{Tenant: "acme", Route: "payments", Key: "k"})
	if err != nil || rec.Response == nil {
		t.Fatalf("record: %+v, %v", rec, err)
	}
	for _, name := range []string{idempotency.HeaderReplayed, idempotency.HeaderReplayedX} {
		if v, ok := rec.Response.Header[name]; ok {
			t.Errorf("the record stored the upstream's %s: %q", name, v)
		}
	}
	again := do(srv, call{key: "k"})
	for _, name := range []string{idempotency.HeaderReplayed, idempotency.HeaderReplayedX} {
		if got := again.Header().Values(name); len(got) != 1 || got[0] != "true" {
			t.Errorf("replay %s = %q, want [true]", name, got)
		}
	}
	if first.Code != http.StatusCreated || again.Code != http.StatusCreated {
		t.Fatalf("statuses %d, %d", first.Code, again.Code)
	}
}
