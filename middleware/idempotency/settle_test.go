package idempotency_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/middleware/idempotency/memstore"
)

var errBlink = errors.New("store unreachable")

// faultyStore is a memstore whose calls can be made to fail, as a store
// does while it restarts or while the network to it is cut.
type faultyStore struct {
	idempotency.Store
	completeFailures atomic.Int64 // the next n Complete calls fail
	completeDown     atomic.Bool  // every Complete fails
	renewDown        atomic.Bool  // every Renew fails
	claimHangs       atomic.Bool  // Claim is made, but its answer never comes
	claimNotDurable  atomic.Bool  // Claim is made, but not known to be durable
	completes        atomic.Int64 // Complete calls that reached the store
	releaseDown      atomic.Bool  // every Release fails
	releaseReason    atomic.Value // the reason the last stored Release carried
	commitWait       atomic.Int64 // Claim and Complete wait this long before they commit, as for a synchronous standby
}

// waitCommit waits commitWait, or returns ctx's error when ctx ends first.
func (s *faultyStore) waitCommit(ctx context.Context) error {
	d := time.Duration(s.commitWait.Load())
	if d == 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func newFaultyStore() *faultyStore { return &faultyStore{Store: memstore.New()} }

func (s *faultyStore) Claim(ctx context.Context, req idempotency.ClaimRequest) (idempotency.ClaimResult, error) {
	if err := s.waitCommit(ctx); err != nil {
		return idempotency.ClaimResult{}, err
	}
	res, err := s.Store.Claim(ctx, req)
	if s.claimHangs.Load() {
		<-ctx.Done()
		return idempotency.ClaimResult{}, ctx.Err()
	}
	if err == nil && s.claimNotDurable.Load() {
		return idempotency.ClaimResult{}, fmt.Errorf("replicas: %w", idempotency.ErrNotDurable)
	}
	return res, err
}

func (s *faultyStore) Renew(ctx context.Context, scope idempotency.Scope, owner string, lease time.Duration) error {
	if s.renewDown.Load() {
		return errBlink
	}
	return s.Store.Renew(ctx, scope, owner, lease)
}

func (s *faultyStore) Complete(ctx context.Context, scope idempotency.Scope, owner string, resp idempotency.Response, retention time.Duration) error {
	if s.completeDown.Load() {
		return errBlink
	}
	if s.completeFailures.Add(-1) >= 0 {
		return errBlink
	}
	if err := s.waitCommit(ctx); err != nil {
		return err
	}
	s.completes.Add(1)
	return s.Store.Complete(ctx, scope, owner, resp, retention)
}

func (s *faultyStore) Release(ctx context.Context, scope idempotency.Scope, owner string) error {
	if s.releaseDown.Load() {
		return errBlink
	}
	err := s.Store.Release(ctx, scope, owner)
	if err == nil {
		s.releaseReason.Store(idempotency.ReleaseReason(ctx))
	}
	return err
}

func drainAtCleanup(t *testing.T, mw *idempotency.Middleware) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := mw.Drain(ctx); err != nil {
			t.Errorf("Drain: %v", err)
		}
	})
}

func callNumber(t *testing.T, body []byte) int64 {
	t.Helper()
	var v struct{ Call int64 }
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("body %q: %v", body, err)
	}
	return v.Call
}

// A store that fails a couple of completions (a restart) costs the client
// nothing: it gets its own answer, stored, and retries replay it.
func TestStoreBlinkAtCompletionCostsNoRerun(t *testing.T) {
	t.Parallel()
	store := newFaultyStore()
	store.completeFailures.Store(2)
	mw := newMW(t, store, idempotency.Config{})
	drainAtCleanup(t, mw)
	h := &counter{}
	srv := mw.Wrap(h)

	first := do(srv, call{key: "blink"})
	if first.Code != http.StatusCreated || callNumber(t, first.Body.Bytes()) != 1 {
		t.Fatalf("first answer %d %s, want its own 201", first.Code, first.Body)
	}
	retry := do(srv, call{key: "blink"})
	if retry.Code != http.StatusCreated || retry.Header().Get(idempotency.HeaderReplayed) != "true" || retry.Body.String() != first.Body.String() {
		t.Fatalf("retry %d %v %s, want the replay of %s", retry.Code, retry.Header(), retry.Body, first.Body)
	}
	if h.calls.Load() != 1 {
		t.Fatalf("handler ran %d times, want 1", h.calls.Load())
	}
}

// A store down for longer than StoreTimeout: the processed request's
// answer is held back (503, retry with the same key), retries get 409
// while the outcome is stored in the background, then its replay. No
// client ever sees an answer the record does not hold.
func TestOutcomeStoredInTheBackground(t *testing.T) {
	t.Parallel()
	store := newFaultyStore()
	store.completeDown.Store(true)
	mw := newMW(t, store, idempotency.Config{StoreTimeout: 100 * time.Millisecond})
	drainAtCleanup(t, mw)
	h := &counter{}
	srv := mw.Wrap(h)

	first := do(srv, call{key: "later"})
	if first.Code != http.StatusServiceUnavailable || problemType(t, first) != "idempotency-store-unavailable" || first.Header().Get("Retry-After") == "" {
		t.Fatalf("first answer %d %v %s, want 503 idempotency-store-unavailable with Retry-After", first.Code, first.Header(), first.Body)
	}
	if w := do(srv, call{key: "later"}); w.Code != http.StatusConflict || problemType(t, w) != "idempotency-key-in-use" {
		t.Fatalf("retry while the outcome is pending: %d %s, want 409 in use", w.Code, w.Body)
	}
	store.completeDown.Store(false)
	w := retryUntil(t, srv, "later", func(w int) bool { return w != http.StatusConflict })
	if w.Code != http.StatusCreated || w.Header().Get(idempotency.HeaderReplayed) != "true" || callNumber(t, w.Body.Bytes()) != 1 {
		t.Fatalf("after the store came back: %d %s, want the replay of call 1", w.Code, w.Body)
	}
	if h.calls.Load() != 1 {
		t.Fatalf("handler ran %d times, want 1", h.calls.Load())
	}
}

// A release stored late, in the background, still says why the key was
// released (the claim ledger keeps it).
func TestReleaseStoredInTheBackgroundKeepsItsReason(t *testing.T) {
	t.Parallel()
	store := newFaultyStore()
	store.releaseDown.Store(true)
	mw := newMW(t, store, idempotency.Config{StoreTimeout: 100 * time.Millisecond})
	drainAtCleanup(t, mw)
	srv := mw.Wrap(&counter{status: http.StatusServiceUnavailable})

	if w := do(srv, call{key: "released-late"}); w.Code != http.StatusServiceUnavailable {
		t.Fatalf("answer %d %s, want the handler's own 503", w.Code, w.Body)
	}
	store.releaseDown.Store(false)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := mw.Drain(ctx); err != nil {
		t.Fatalf("Drain: %v", err)
	}
	if got, want := store.releaseReason.Load(), "not processed: the upstream answered 503"; got != want {
		t.Fatalf("the late release carried reason %q, want %q", got, want)
	}
}

// retryUntil sends the key until done accepts the status, for at most 10s.
func retryUntil(t *testing.T, srv http.Handler, key string, done func(int) bool) *httptest.ResponseRecorder {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		w := do(srv, call{key: key})
		if done(w.Code) {
			return w
		}
		if time.Now().After(deadline) {
			t.Fatalf("still %d %s after 10s", w.Code, w.Body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Drain gives up on an outcome the store never takes, when its context
// ends, and leaves no goroutine behind.
func TestDrainGivesUp(t *testing.T) {
	t.Parallel()
	store := newFaultyStore()
	store.completeDown.Store(true)
	mw := newMW(t, store, idempotency.Config{StoreTimeout: 50 * time.Millisecond})
	if w := do(mw.Wrap(&counter{}), call{key: "never"}); w.Code != http.StatusServiceUnavailable {
		t.Fatalf("answer %d %s, want 503", w.Code, w.Body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := mw.Drain(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Drain = %v, want context.DeadlineExceeded", err)
	}
}

// An attempt whose claim was taken over (its lease ran out while it was
// cut off from the store) answers its client with what the record holds,
// never with its own stale outcome.
func TestTakenOverAttemptAnswersFromTheRecord(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// newerDone: the newer attempt has completed when the stale one ends.
		newerDone bool
	}{{"the newer attempt completed", true}, {"the newer attempt still runs", false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			store := newFaultyStore()
			store.renewDown.Store(true)
			mw := newMW(t, store, idempotency.Config{Lease: 100 * time.Millisecond})
			drainAtCleanup(t, mw)
			staleGo, newerGo := make(chan struct{}), make(chan struct{})
			var calls atomic.Int64
			srv := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n := calls.Add(1)
				if n == 1 {
					<-staleGo
				} else {
					<-newerGo
				}
				w.WriteHeader(http.StatusCreated)
				_ = json.NewEncoder(w).Encode(map[string]int64{"call": n})
			}))

			staleDone := make(chan *httptest.ResponseRecorder)
			go func() { staleDone <- do(srv, call{key: "k"}) }()
			// Wait for the stale attempt's lease to run out (renewals fail),
			// then let a retry take the key over.
			for calls.Load() == 0 {
				time.Sleep(5 * time.Millisecond)
			}
			newerDone := make(chan *httptest.ResponseRecorder)
			go func() {
				newerDone <- retryUntil(t, srv, "k", func(c int) bool { return c != http.StatusConflict })
			}()
			for calls.Load() < 2 {
				time.Sleep(5 * time.Millisecond)
			}
			var newer *httptest.ResponseRecorder
			if tc.newerDone {
				close(newerGo)
				newer = <-newerDone
			}
			close(staleGo)
			stale := <-staleDone
			if !tc.newerDone {
				if stale.Code != http.StatusConflict || problemType(t, stale) != "idempotency-key-in-use" {
					t.Fatalf("stale attempt answered %d %s, want 409 while the newer one runs", stale.Code, stale.Body)
				}
				close(newerGo)
				newer = <-newerDone
				if callNumber(t, newer.Body.Bytes()) != 2 {
					t.Fatalf("newer attempt answered %s, want call 2", newer.Body)
				}
				return
			}
			if stale.Code != http.StatusCreated || stale.Body.String() != newer.Body.String() || stale.Header().Get(idempotency.HeaderReplayed) != "true" {
				t.Fatalf("stale attempt answered %d %s, want the stored answer %s", stale.Code, stale.Body, newer.Body)
			}
		})
	}
}

// A claim whose answer never comes is refused fast with 503, and let go,
// so the retry runs at once instead of waiting for the lease.
func TestClaimTimeout(t *testing.T) {
	t.Parallel()
	store := newFaultyStore()
	store.claimHangs.Store(true)
	mw := newMW(t, store, idempotency.Config{CommitTimeout: 100 * time.Millisecond, Lease: time.Minute})
	drainAtCleanup(t, mw)
	h := &counter{}
	srv := mw.Wrap(h)
	w := do(srv, call{key: "hang"})
	if w.Code != http.StatusServiceUnavailable || problemType(t, w) != "idempotency-store-unavailable" || w.Header().Get("Retry-After") == "" {
		t.Fatalf("answer %d %v %s, want 503 with Retry-After", w.Code, w.Header(), w.Body)
	}
	if h.calls.Load() != 0 {
		t.Fatal("the handler ran without a claim")
	}
	store.claimHangs.Store(false)
	w = retryUntil(t, srv, "hang", func(c int) bool { return c != http.StatusConflict })
	if w.Code != http.StatusCreated || h.calls.Load() != 1 {
		t.Fatalf("retry: %d %s, calls %d; want 201 from one run", w.Code, w.Body, h.calls.Load())
	}
}

// Commits slower than StoreTimeout (a synchronous standby a little behind)
// are bounded by CommitTimeout instead: the request is answered with its
// own response, stored, not a 503, and its retry replays it.
func TestSlowCommitWithinCommitTimeout(t *testing.T) {
	t.Parallel()
	store := newFaultyStore()
	store.commitWait.Store(int64(300 * time.Millisecond))
	mw := newMW(t, store, idempotency.Config{StoreTimeout: 50 * time.Millisecond, CommitTimeout: 10 * time.Second, Lease: time.Minute})
	drainAtCleanup(t, mw)
	h := &counter{}
	srv := mw.Wrap(h)
	first := do(srv, call{key: "slow-commit"})
	if first.Code != http.StatusCreated || callNumber(t, first.Body.Bytes()) != 1 {
		t.Fatalf("answer %d %s, want its own 201 although each commit outlasts store_timeout", first.Code, first.Body)
	}
	retry := do(srv, call{key: "slow-commit"})
	if retry.Code != http.StatusCreated || retry.Header().Get(idempotency.HeaderReplayed) != "true" || h.calls.Load() != 1 {
		t.Fatalf("retry %d %v, calls %d; want the replay of one run", retry.Code, retry.Header(), h.calls.Load())
	}
}

// The lease as this process sees it runs out when renewals fail, and
// Attempt.Check says so: a proxy then does not go upstream.
func TestAttemptCheckAfterTheLease(t *testing.T) {
	t.Parallel()
	store := newFaultyStore()
	store.renewDown.Store(true)
	mw := newMW(t, store, idempotency.Config{Lease: 100 * time.Millisecond})
	drainAtCleanup(t, mw)
	var before, after error
	srv := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, _ := idempotency.AttemptFrom(r.Context())
		before = a.Check()
		time.Sleep(300 * time.Millisecond) // three leases, none renewed
		after = a.Check()
		w.WriteHeader(http.StatusNoContent)
	}))
	do(srv, call{key: "paused"})
	if before != nil || !errors.Is(after, idempotency.ErrLeaseExpired) {
		t.Fatalf("Check before = %v, after = %v; want nil, then ErrLeaseExpired", before, after)
	}
}
