package gateway

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/middleware/idempotency"
)

func TestKeyHistoryTellsEachRequestOfAKey(t *testing.T) {
	t.Parallel()
	var calls int
	g, public := servePayments(t, testOptions(nil), func(w http.ResponseWriter, r *http.Request) {
		calls++
		w.WriteHeader(http.StatusCreated)
	})
	post := func(key, body string) int {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, public.URL+"/v1/payments", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+testAPIKey)
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	statuses := []int{post("pay-1", `{"a":1}`), post("pay-1", `{"a":1}`), post("pay-1", `{"a":2}`), post("pay-2", `{"a":1}`)}
	if !slices.Equal(statuses, []int{201, 201, 422, 201}) || calls != 2 {
		t.Fatalf("statuses %v, upstream calls %d: want 201 201 422 201 and 2 calls", statuses, calls)
	}
	reqs, dropped := g.KeyHistory().Requests(idempotency.Scope{Tenant: "acme", Route: "payments", Key: "pay-1"})
	var kinds []RecentKind
	for _, r := range reqs {
		kinds = append(kinds, r.Kind)
		if r.RequestID == "" || r.At.IsZero() {
			t.Errorf("request %+v: want its id and time", r)
		}
	}
	if want := []RecentKind{RecentNew, RecentReplayed, RecentMismatch}; !slices.Equal(kinds, want) || dropped != 0 {
		t.Fatalf("pay-1's requests %v (%d dropped): want %v", kinds, dropped, want)
	}
	if reqs[2].Status != http.StatusUnprocessableEntity {
		t.Errorf("the reuse's status %d: want 422", reqs[2].Status)
	}
	if other, _ := g.KeyHistory().Requests(idempotency.Scope{Tenant: "acme", Route: "payments", Key: "pay-2"}); len(other) != 1 {
		t.Errorf("pay-2's requests %v: want its one", other)
	}
}

func TestKeyHistoryIsBounded(t *testing.T) {
	t.Parallel()
	h := NewKeyHistory()
	at := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	first := idempotency.Scope{Tenant: "acme", Route: "payments", Key: "k-0"}
	for i := range KeyHistoryDepth + 4 {
		h.observe(first, string(idempotency.OutcomeReplay), "", 200, fmt.Sprint("r", i), at.Add(time.Duration(i)*time.Second))
	}
	reqs, dropped := h.Requests(first)
	if len(reqs) != KeyHistoryDepth || dropped != 4 || reqs[0].RequestID != "r4" || reqs[len(reqs)-1].RequestID != fmt.Sprint("r", KeyHistoryDepth+3) {
		t.Fatalf("%d kept, %d dropped, first %+v: want the last %d, oldest first", len(reqs), dropped, reqs[0], KeyHistoryDepth)
	}
	h.observe(first, "passthrough", "", 200, "r-pass", at)
	if reqs, _ := h.Requests(first); reqs[len(reqs)-1].RequestID == "r-pass" {
		t.Fatal("a request the middleware did not decide on was recorded")
	}
	for i := 1; i <= KeyHistoryKeys; i++ {
		h.observe(idempotency.Scope{Tenant: "acme", Route: "payments", Key: fmt.Sprint("k-", i)}, string(idempotency.OutcomeNew), "", 201, "r", at)
	}
	if reqs, _ := h.Requests(first); reqs != nil {
		t.Fatalf("the first key's requests after %d newer keys: %d kept, want it forgotten", KeyHistoryKeys, len(reqs))
	}
	if reqs, _ := h.Requests(idempotency.Scope{Tenant: "acme", Route: "payments", Key: "k-1"}); len(reqs) != 1 {
		t.Fatalf("the second key's requests: %v, want one", reqs)
	}
	if len(h.keys) != KeyHistoryKeys {
		t.Fatalf("%d keys kept: want %d", len(h.keys), KeyHistoryKeys)
	}
}

// BenchmarkKeyHistoryObserve is what the key history adds to a request on
// the public path: a new key (the map insert, and the eviction once full)
// and a key seen before (a replay).
func BenchmarkKeyHistoryObserve(b *testing.B) {
	at := time.Now()
	scopes := make([]idempotency.Scope, 2*KeyHistoryKeys)
	for i := range scopes {
		scopes[i] = idempotency.Scope{Tenant: "acme", Route: "payments", Key: fmt.Sprint("key-", i)}
	}
	b.Run("new", func(b *testing.B) {
		h := NewKeyHistory()
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			h.observe(scopes[i%len(scopes)], string(idempotency.OutcomeNew), "", 201, "req", at)
		}
	})
	b.Run("replay", func(b *testing.B) {
		h := NewKeyHistory()
		h.observe(scopes[0], string(idempotency.OutcomeNew), "", 201, "req", at)
		b.ReportAllocs()
		for b.Loop() {
			h.observe(scopes[0], string(idempotency.OutcomeReplay), "", 201, "req", at)
		}
	})
}
