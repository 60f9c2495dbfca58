package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/middleware/idempotency/redisstore"
)

const waitPrefix = "wait:"

// newWaitStore returns a store on client that waits for one replica for
// at most timeout.
func newWaitStore(t *testing.T, client redis.UniversalClient, timeout time.Duration) *redisstore.Store {
	t.Helper()
	s := redisstore.New(client, redisstore.WithPrefix(waitPrefix), redisstore.WithWait(1, timeout))
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// stateOn is the state of sc's record as r holds it ("" when it has none).
func stateOn(t *testing.T, r *testkit.PrivateRedis, sc idempotency.Scope) string {
	t.Helper()
	// READONLY lets a cluster replica answer; a plain replica ignores it.
	// One pipeline is one connection, so the HGET follows it.
	pipe := r.Client.Pipeline()
	pipe.ReadOnly(t.Context())
	get := pipe.HGet(t.Context(), redisstore.RecordKey(waitPrefix, sc), "state")
	_, _ = pipe.Exec(t.Context())
	st, err := get.Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		t.Fatalf("HGET on %s: %v", r.Addr(), err)
	}
	return st
}

func wantNotDurable(t *testing.T, what string, err error) {
	t.Helper()
	var re *redisstore.ReplicaError
	if !errors.Is(err, idempotency.ErrNotDurable) || !errors.As(err, &re) {
		t.Fatalf("%s: %v, want a *ReplicaError (ErrNotDurable)", what, err)
	}
	if re.Acked != 0 || re.Want != 1 {
		t.Fatalf("%s: %d of %d replicas acknowledged, want 0 of 1", what, re.Acked, re.Want)
	}
}

// TestWaitReplicas: with the replica attached, a claim and a completion
// return once the replica holds them; with the replica stopped, neither a
// new claim nor a record another gateway completed meanwhile is answered,
// since a failover could lose what it would promise.
func TestWaitReplicas(t *testing.T) {
	primary, replica := testkit.RedisReplicated(t)
	s := newWaitStore(t, primary.Client, time.Second)
	ctx := t.Context()
	done, late := scope("done"), scope("late")

	claim(t, s, done, "owner-1", 10*time.Second, time.Hour)
	if st := stateOn(t, replica, done); st != string(idempotency.StateInFlight) {
		t.Fatalf("after Claim the replica holds state %q, want in_flight", st)
	}
	if err := s.Complete(ctx, done, "owner-1", idempotency.Response{Status: 201, Body: []byte("made")}, time.Hour); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if st := stateOn(t, replica, done); st != string(idempotency.StateCompleted) {
		t.Fatalf("after Complete the replica holds state %q, want completed", st)
	}
	claim(t, s, late, "owner-2", 10*time.Second, time.Hour)

	resume := replica.Stop(t)
	// Another gateway, on connections of its own that wrote nothing the
	// replica lacks: what it reads must wait all the same.
	other := redis.NewClient(&redis.Options{Addr: primary.Addr()})
	t.Cleanup(func() { _ = other.Close() })
	s2 := newWaitStore(t, other, time.Second)
	wantNotDurable(t, "Complete, replica stopped", s.Complete(ctx, late, "owner-2", idempotency.Response{Status: 201}, time.Hour))
	_, err := s2.Claim(ctx, idempotency.ClaimRequest{Scope: late, Fingerprint: "fp", Owner: "owner-3", Lease: 10 * time.Second, Retention: time.Hour})
	wantNotDurable(t, "another gateway's Claim of the key completed on the primary only", err)
	_, err = s2.Get(ctx, late)
	wantNotDurable(t, "another gateway's Get of the key completed on the primary only", err)
	_, err = s2.Claim(ctx, idempotency.ClaimRequest{Scope: scope("new"), Fingerprint: "fp", Owner: "owner-4", Lease: 10 * time.Second, Retention: time.Hour})
	wantNotDurable(t, "Claim of a new key, replica stopped", err)

	resume()
	res, err := s2.Claim(ctx, idempotency.ClaimRequest{Scope: done, Fingerprint: "fp", Owner: "owner-5", Lease: 10 * time.Second, Retention: time.Hour})
	if err != nil || res.Claimed || res.Record.Response == nil || string(res.Record.Response.Body) != "made" {
		t.Fatalf("Claim of the completed key, replica back: %+v %v, want its stored response", res, err)
	}
}

// TestWaitSettleAgain: a completion or a hold whose wait fell short is on
// the primary; sent again by its owner it is confirmed, not refused as
// someone else's, and it succeeds once the replica acknowledges it. A
// release does not wait.
func TestWaitSettleAgain(t *testing.T) {
	primary, replica := testkit.RedisReplicated(t)
	s := newWaitStore(t, primary.Client, time.Second)
	ctx := t.Context()
	completed, held, released := scope("completed"), scope("held"), scope("released")
	claim(t, s, completed, "c", 10*time.Second, time.Hour)
	claim(t, s, held, "h", 10*time.Second, time.Hour)
	claim(t, s, released, "r", 10*time.Second, time.Hour)

	resume := replica.Stop(t)
	resp := idempotency.Response{Status: 201, Body: []byte("made")}
	for range 2 {
		wantNotDurable(t, "Complete, replica stopped", s.Complete(ctx, completed, "c", resp, time.Hour))
		wantNotDurable(t, "MarkUnknown, replica stopped", s.MarkUnknown(ctx, held, "h"))
	}
	if err := s.Release(ctx, released, "r"); err != nil {
		t.Fatalf("Release, replica stopped: %v, want nil (a release does not wait)", err)
	}

	resume()
	testkit.WaitInSync(t, primary, replica)
	if err := s.Complete(ctx, completed, "someone-else", resp, time.Hour); !errors.Is(err, idempotency.ErrNotOwner) {
		t.Fatalf("Complete by another owner: %v, want ErrNotOwner", err)
	}
	if err := s.Complete(ctx, completed, "c", resp, time.Hour); err != nil {
		t.Fatalf("Complete again, replica back: %v", err)
	}
	if err := s.MarkUnknown(ctx, held, "h"); err != nil {
		t.Fatalf("MarkUnknown again, replica back: %v", err)
	}
	if st := stateOn(t, replica, completed); st != string(idempotency.StateCompleted) {
		t.Fatalf("replica holds %q for the completed key, want completed", st)
	}
	if st := stateOn(t, replica, held); st != string(idempotency.StateUnknown) {
		t.Fatalf("replica holds %q for the held key, want unknown", st)
	}
	rec, err := s.Get(ctx, completed)
	if err != nil || rec.Response == nil || rec.Response.Status != 201 {
		t.Fatalf("Get: %+v %v, want the stored 201", rec, err)
	}
}

// TestWaitBatch: concurrent claims and completions share pipelines, and
// one WAIT covers each: fewer WAITs than scripts, every record on the
// replica.
func TestWaitBatch(t *testing.T) {
	primary, replica := testkit.RedisReplicated(t)
	s := newWaitStore(t, primary.Client, time.Second)
	const n = 64
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			sc, owner := scope(fmt.Sprint("k", i)), fmt.Sprint("o", i)
			_, err := s.Claim(t.Context(), idempotency.ClaimRequest{Scope: sc, Fingerprint: "fp", Owner: owner, Lease: 10 * time.Second, Retention: time.Hour})
			if err == nil {
				err = s.Complete(t.Context(), sc, owner, idempotency.Response{Status: 200}, time.Hour)
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("key %d: %v", i, err)
		}
		if st := stateOn(t, replica, scope(fmt.Sprint("k", i))); st != string(idempotency.StateCompleted) {
			t.Fatalf("key %d: the replica holds %q, want completed", i, st)
		}
	}
	scripts, waits := redisstore.PipelineWaits(s)
	t.Logf("%d scripts, %d WAITs", scripts, waits)
	if waits >= scripts {
		t.Fatalf("%d WAITs for %d scripts: none covered a batch", waits, scripts)
	}
}

// TestWaitCluster: in a cluster, each script's WAIT goes to the primary
// that owns its key, so a stopped replica holds back the keys of its own
// primary only, also within one batch.
func TestWaitCluster(t *testing.T) {
	primaries, replicas := testkit.RedisClusterReplicated(t)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{primaries[0].Addr(), primaries[1].Addr()}})
	t.Cleanup(func() { _ = cc.Close() })
	s := newWaitStore(t, cc, time.Second)
	ctx := t.Context()

	// A key on each primary.
	var on [2]idempotency.Scope
	for i, found := 0, 0; found < 2; i++ {
		sc := scope(fmt.Sprint("c", i))
		node, err := cc.MasterForKey(ctx, redisstore.RecordKey(waitPrefix, sc))
		if err != nil {
			t.Fatal(err)
		}
		p := 0
		if strings.HasSuffix(node.Options().Addr, primaries[1].Addr()) {
			p = 1
		}
		if on[p] == (idempotency.Scope{}) {
			on[p], found = sc, found+1
		}
	}

	resume := replicas[0].Stop(t)
	defer resume()
	var wg sync.WaitGroup
	var errs [2]error
	for i := range on {
		wg.Go(func() {
			_, errs[i] = s.Claim(ctx, idempotency.ClaimRequest{Scope: on[i], Fingerprint: "fp", Owner: "o", Lease: 10 * time.Second, Retention: time.Hour})
		})
	}
	wg.Wait()
	wantNotDurable(t, "Claim on the primary whose replica is stopped", errs[0])
	if errs[1] != nil {
		t.Fatalf("Claim on the other primary: %v", errs[1])
	}
	if st := stateOn(t, replicas[1], on[1]); st != string(idempotency.StateInFlight) {
		t.Fatalf("the other primary's replica holds %q, want in_flight", st)
	}
}

// TestWaitMiddleware: what a client sees. A claim the replica does not
// acknowledge is refused with 503 and Retry-After and nothing runs, even
// under fail_open; a completion it does not acknowledge is held back
// (503), stored once the replica is back, and replayed to the retry: one
// run, one answer.
func TestWaitMiddleware(t *testing.T) {
	primary, replica := testkit.RedisReplicated(t)
	s := newWaitStore(t, primary.Client, time.Second)

	var calls atomic.Int64
	var stopDuring atomic.Bool
	var resume func()
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if stopDuring.Load() {
			resume = replica.Stop(t) // the replica falls behind while the request runs
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "made")
	})
	newHandler := func(policy idempotency.StoreErrorPolicy) http.Handler {
		m, err := idempotency.New(s, idempotency.Config{Route: "r", StoreTimeout: 3 * time.Second,
			OnStoreError: policy, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = m.Drain(ctx)
		})
		return m.Wrap(app)
	}
	do := func(h http.Handler, key string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "/r", strings.NewReader(`{"a":1}`))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set(idempotency.HeaderKey, key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	want503 := func(what string, w *httptest.ResponseRecorder) {
		t.Helper()
		if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
			t.Fatalf("%s: %d (Retry-After %q) %s, want 503 with Retry-After", what, w.Code, w.Header().Get("Retry-After"), w.Body)
		}
	}

	closed, open := newHandler(idempotency.FailClosed), newHandler(idempotency.FailOpen)
	t.Run("claim", func(t *testing.T) {
		resume := replica.Stop(t)
		want503("claim, fail_closed", do(closed, "claim-1"))
		want503("claim, fail_open", do(open, "claim-2"))
		if n := calls.Load(); n != 0 {
			t.Fatalf("the handler ran %d times, want 0", n)
		}
		resume()
		testkit.WaitInSync(t, primary, replica)
		// The refused claim was let go: the retry runs, once.
		testkit.Eventually(t, "the retry runs", 30*time.Second, func() bool {
			return do(closed, "claim-1").Code == http.StatusCreated
		})
		if n := calls.Load(); n != 1 {
			t.Fatalf("the handler ran %d times, want 1", n)
		}
	})

	t.Run("completion", func(t *testing.T) {
		before := calls.Load()
		stopDuring.Store(true)
		want503("completion, replica stopped during the request", do(closed, "done-1"))
		stopDuring.Store(false)
		if resume == nil {
			t.Fatal("the handler did not run")
		}
		want503("retry, replica still stopped", do(closed, "done-1"))
		resume()
		testkit.WaitInSync(t, primary, replica)
		var w *httptest.ResponseRecorder
		testkit.Eventually(t, "the held answer", 30*time.Second, func() bool {
			w = do(closed, "done-1")
			return w.Code != http.StatusServiceUnavailable
		})
		if w.Code != http.StatusCreated || w.Body.String() != "made" || w.Header().Get(idempotency.HeaderReplayed) != "true" {
			t.Fatalf("retry once the replica is back: %d %q replayed=%q, want the stored 201 made",
				w.Code, w.Body, w.Header().Get(idempotency.HeaderReplayed))
		}
		if n := calls.Load() - before; n != 1 {
			t.Fatalf("the handler ran %d times for one key, want 1", n)
		}
	})
}
