package pgstore

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/idemgate/idemgate/middleware/idempotency"
)

// TestMultiRowStatementsAnswerAsSingleRows: claims and completions that
// queue behind a busy flusher go out as one multi-row statement each, and
// every caller gets what its own statement would have given it: new keys
// claimed at token 1, a duplicate in the same batch refused, a completed
// key replayed, a key in flight refused, a released key taken over at
// token 2, completions by their owner stored and one by a stranger
// refused.
func TestMultiRowStatementsAnswerAsSingleRows(t *testing.T) {
	t.Parallel()
	pool := testenv.Pool(t)
	setup := New(pool, WithBatching(0, 0))
	t.Cleanup(setup.Close)
	s := New(pool, WithBatching(1, 64))
	t.Cleanup(s.Close)
	ctx := t.Context()

	scope := func(key string) idempotency.Scope {
		return idempotency.Scope{Tenant: "acme", Route: "payments", Key: key}
	}
	claim := func(st *Store, key, owner string) (idempotency.ClaimResult, error) {
		return st.Claim(ctx, idempotency.ClaimRequest{Scope: scope(key), Fingerprint: "fp", Owner: owner, Lease: time.Minute, Retention: time.Hour})
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	// The records as they stand before the batch.
	for _, key := range []string{"done", "busy", "released", "c1", "c2", "c3", "c4"} {
		_, err := claim(setup, key, "old-"+key)
		must(err)
	}
	must(setup.Complete(ctx, scope("done"), "old-done", idempotency.Response{Status: 201, Body: []byte("stored")}, time.Hour))
	must(setup.Release(ctx, scope("released"), "old-released"))

	// Hold the only flusher so that everything below queues into one batch.
	slow := &op{sql: "SELECT pg_sleep(0.3)"}
	slowDone := make(chan error, 1)
	go func() { err, _ := s.batch.do(context.Background(), slow); slowDone <- err }()
	time.Sleep(50 * time.Millisecond)

	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		claims = map[string]idempotency.ClaimResult{}
		errs   = map[string]error{}
	)
	note := func(name string, res idempotency.ClaimResult, err error) {
		mu.Lock()
		defer mu.Unlock()
		claims[name], errs[name] = res, err
	}
	for _, c := range []struct{ name, key, owner string }{
		{"new1", "n1", "a"}, {"new1-again", "n1", "b"}, {"new2", "n2", "a"}, {"new3", "n3", "a"},
		{"new4", "n4", "a"}, {"new5", "n5", "a"}, {"done", "done", "a"}, {"busy", "busy", "a"},
		{"released", "released", "a"},
	} {
		wg.Go(func() {
			res, err := claim(s, c.key, c.owner)
			note(c.name, res, err)
		})
	}
	for _, c := range []struct{ key, owner string }{{"c1", "old-c1"}, {"c2", "old-c2"}, {"c3", "old-c3"}, {"c4", "stranger"}} {
		wg.Go(func() {
			err := s.Complete(ctx, scope(c.key), c.owner, idempotency.Response{Status: 201, Body: []byte(c.key)}, time.Hour)
			note("complete "+c.key, idempotency.ClaimResult{}, err)
		})
	}
	wg.Wait()
	must(<-slowDone)

	for name, err := range errs {
		if err != nil && name != "complete c4" {
			t.Fatalf("%s: %v", name, err)
		}
	}
	for _, name := range []string{"new2", "new3", "new4", "new5"} {
		if r := claims[name]; !r.Claimed || r.TakeOver || r.Record.FencingToken != 1 {
			t.Errorf("%s: %+v, want claimed at token 1", name, r)
		}
	}
	if a, b := claims["new1"].Claimed, claims["new1-again"].Claimed; a == b {
		t.Errorf("two claims of n1 in one batch: claimed %v and %v, want exactly one", a, b)
	}
	if r := claims["done"]; r.Claimed || r.Record.State != idempotency.StateCompleted || string(r.Record.Response.Body) != "stored" {
		t.Errorf("completed key: %+v, want its stored answer", r)
	}
	if r := claims["busy"]; r.Claimed || r.Record.State != idempotency.StateInFlight {
		t.Errorf("key in flight: %+v, want refused", r)
	}
	if r := claims["released"]; !r.Claimed || !r.TakeOver || r.Record.FencingToken != 2 {
		t.Errorf("released key: %+v, want taken over at token 2", r)
	}
	for _, key := range []string{"c1", "c2", "c3"} {
		rec, err := s.Get(ctx, scope(key))
		if err != nil || rec.State != idempotency.StateCompleted || string(rec.Response.Body) != key {
			t.Errorf("%s after its completion: %+v %v", key, rec, err)
		}
	}
	if err := errs["complete c4"]; !errors.Is(err, idempotency.ErrNotOwner) {
		t.Errorf("completion by a stranger: %v, want ErrNotOwner", err)
	}
	if rec, err := s.Get(ctx, scope("c4")); err != nil || rec.State != idempotency.StateInFlight {
		t.Errorf("c4 after a stranger's completion: %+v %v, want still in flight", rec, err)
	}
	// The batch's claims and completions went out as multi-row statements
	// (all but the duplicate claim of n1, which goes alone).
	if got := s.batch.shared.Load(); got < 12 {
		t.Errorf("%d statements shared a multi-row statement, want the batch's 8 claims and 4 completions", got)
	}
	claimsOf := func(key string) int {
		var n int
		must(pool.QueryRow(ctx, `SELECT count(*) FROM idempotency_claims WHERE key = $1`, key).Scan(&n))
		return n
	}
	for key, want := range map[string]int{"n1": 1, "n2": 1, "released": 2, "done": 1} {
		if got := claimsOf(key); got != want {
			t.Errorf("%s has %d ledger rows, want %d", key, got, want)
		}
	}
}
