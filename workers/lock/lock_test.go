package lock_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/workers/lock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newLocker(t testing.TB, rdb lock.Client, opts lock.Options) *lock.Locker {
	t.Helper()
	l, err := lock.New(rdb, opts)
	if err != nil {
		t.Fatalf("lock.New: %v", err)
	}
	return l
}

func acquire(t *testing.T, l *lock.Locker, resource string) *lock.Lease {
	t.Helper()
	lease, err := l.Acquire(t.Context(), resource)
	if err != nil {
		t.Fatalf("Acquire(%q): %v", resource, err)
	}
	t.Cleanup(func() { _ = lease.Release(context.Background()) })
	return lease
}

func TestNewValidatesOptions(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	t.Cleanup(func() { _ = rdb.Close() })
	tests := []struct {
		name    string
		client  lock.Client
		opts    lock.Options
		wantErr bool
	}{
		{name: "zero options use defaults", client: rdb},
		{name: "explicit", client: rdb, opts: lock.Options{TTL: 2 * time.Second, Wait: time.Second, RetryInterval: time.Millisecond}},
		{name: "nil client", client: nil, wantErr: true},
		{name: "ttl too short", client: rdb, opts: lock.Options{TTL: 5 * time.Millisecond}, wantErr: true},
		{name: "ttl not whole milliseconds", client: rdb, opts: lock.Options{TTL: 15500 * time.Microsecond}, wantErr: true},
		{name: "negative wait", client: rdb, opts: lock.Options{Wait: -time.Second}, wantErr: true},
		{name: "negative retry interval", client: rdb, opts: lock.Options{RetryInterval: -time.Second}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l, err := lock.New(tt.client, tt.opts)
			if (err != nil) != tt.wantErr {
				t.Fatalf("New: err = %v, wantErr %v", err, tt.wantErr)
			}
			if err == nil && l.TTL() <= 0 {
				t.Fatalf("TTL() = %s, want a positive default", l.TTL())
			}
		})
	}
}

func TestNewReportsEveryProblem(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = rdb.Close() })
	_, err := lock.New(rdb, lock.Options{TTL: time.Millisecond, Wait: -1, RetryInterval: -1})
	if err == nil {
		t.Fatal("New accepted invalid options")
	}
	var joined interface{ Unwrap() []error }
	if !errors.As(err, &joined) || len(joined.Unwrap()) != 3 {
		t.Fatalf("New: %v, want the 3 problems joined", err)
	}
}

func TestKeyIsHashTagged(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = rdb.Close() })
	tests := []struct {
		name, prefix, resource, want string
	}{
		{name: "no prefix", resource: "order:42", want: "lock:{order:42}"},
		{name: "prefix", prefix: "idemgate:", resource: "sku:9", want: "idemgate:lock:{sku:9}"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l := newLocker(t, rdb, lock.Options{Prefix: tt.prefix})
			if got := l.Key(tt.resource); got != tt.want {
				t.Fatalf("Key(%q) = %q, want %q", tt.resource, got, tt.want)
			}
		})
	}
}

func TestAcquireIsExclusive(t *testing.T) {
	t.Parallel()
	rdb := testkit.Redis(t)
	l := newLocker(t, rdb, lock.Options{Prefix: testkit.Prefix(), TTL: 20 * time.Second, Wait: time.Minute, RetryInterval: 5 * time.Millisecond})

	const contenders, rounds = 8, 15
	var holders, maxHolders, taken atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, contenders)
	for range contenders {
		wg.Go(func() {
			for range rounds {
				lease, err := l.Acquire(t.Context(), "account:1")
				if err != nil {
					errs <- err
					return
				}
				n := holders.Add(1)
				for {
					m := maxHolders.Load()
					if n <= m || maxHolders.CompareAndSwap(m, n) {
						break
					}
				}
				taken.Add(1)
				time.Sleep(time.Millisecond)
				holders.Add(-1)
				if err := lease.Release(context.Background()); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("contender: %v", err)
	}
	if got := maxHolders.Load(); got != 1 {
		t.Fatalf("at most %d holders at once, want 1", got)
	}
	if got := taken.Load(); got != contenders*rounds {
		t.Fatalf("lock taken %d times, want %d", got, contenders*rounds)
	}
}

func TestAcquireBusy(t *testing.T) {
	t.Parallel()
	rdb := testkit.Redis(t)
	prefix := testkit.Prefix()
	holder := newLocker(t, rdb, lock.Options{Prefix: prefix, TTL: 20 * time.Second})
	lease := acquire(t, holder, "order:1")

	tests := []struct {
		name string
		wait time.Duration
	}{
		{name: "try once", wait: 0},
		{name: "bounded wait runs out", wait: 150 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			other := newLocker(t, rdb, lock.Options{Prefix: prefix, TTL: 20 * time.Second, Wait: tt.wait, RetryInterval: 20 * time.Millisecond})
			_, err := other.Acquire(t.Context(), "order:1")
			if !errors.Is(err, lock.ErrBusy) {
				t.Fatalf("Acquire on a held lock: %v, want ErrBusy", err)
			}
		})
	}
	if err := lease.Err(); err != nil {
		t.Fatalf("holder's lease ended: %v", err)
	}
	if got := rdb.Get(t.Context(), holder.Key("order:1")).Val(); got == "" {
		t.Fatal("holder's key is gone after a busy contender gave up")
	}
}

func TestAcquireWaitsForRelease(t *testing.T) {
	t.Parallel()
	rdb := testkit.Redis(t)
	prefix := testkit.Prefix()
	holder := newLocker(t, rdb, lock.Options{Prefix: prefix, TTL: 20 * time.Second})
	waiter := newLocker(t, rdb, lock.Options{Prefix: prefix, TTL: 20 * time.Second, Wait: time.Minute, RetryInterval: 10 * time.Millisecond})
	lease := acquire(t, holder, "order:2")

	got := make(chan error, 1)
	go func() {
		l, err := waiter.Acquire(t.Context(), "order:2")
		if err == nil {
			err = l.Release(context.Background())
		}
		got <- err
	}()
	time.Sleep(100 * time.Millisecond) // let the waiter find the lock busy at least once
	if err := lease.Release(t.Context()); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiter: %v", err)
	}
}

func TestAcquireStopsWaitingWithContext(t *testing.T) {
	t.Parallel()
	rdb := testkit.Redis(t)
	prefix := testkit.Prefix()
	acquire(t, newLocker(t, rdb, lock.Options{Prefix: prefix, TTL: 20 * time.Second}), "order:3")
	waiter := newLocker(t, rdb, lock.Options{Prefix: prefix, Wait: time.Hour})
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	_, err := waiter.Acquire(ctx, "order:3")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire with an ended context: %v, want DeadlineExceeded", err)
	}
}

func TestReleaseDeletesOwnKey(t *testing.T) {
	t.Parallel()
	rdb := testkit.Redis(t)
	l := newLocker(t, rdb, lock.Options{Prefix: testkit.Prefix(), TTL: 20 * time.Second})
	lease := acquire(t, l, "order:4")
	if n := rdb.Exists(t.Context(), l.Key("order:4")).Val(); n != 1 {
		t.Fatalf("key missing while held")
	}
	for i := range 2 { // the second Release is a no-op
		if err := lease.Release(t.Context()); err != nil {
			t.Fatalf("Release #%d: %v", i+1, err)
		}
	}
	if n := rdb.Exists(t.Context(), l.Key("order:4")).Val(); n != 0 {
		t.Fatal("key still present after Release")
	}
	if !errors.Is(lease.Err(), lock.ErrReleased) {
		t.Fatalf("Err() after Release = %v, want ErrReleased", lease.Err())
	}
	// Released means free: someone else can take it at once.
	acquire(t, l, "order:4")
}

// ReleaseWith deletes the lock and runs the writes it is given in the
// same pipeline (the worker gives a job's limit slots back with it); an
// old owner's ReleaseWith leaves the new owner's key alone but still
// sends its own writes.
func TestReleaseWithSendsMoreWrites(t *testing.T) {
	t.Parallel()
	rdb := testkit.Redis(t)
	prefix := testkit.Prefix()
	l := newLocker(t, rdb, lock.Options{Prefix: prefix, TTL: 20 * time.Second})
	lease := acquire(t, l, "order:6")
	slots := prefix + "slots"
	rdb.ZAdd(t.Context(), slots, redis.Z{Score: 1, Member: "holder-1"})
	sent, err := lease.ReleaseWith(t.Context(), func(pipe redis.Pipeliner) { pipe.ZRem(t.Context(), slots, "holder-1") })
	if err != nil || !sent {
		t.Fatalf("ReleaseWith = %v, %v; want sent, nil", sent, err)
	}
	if n := rdb.Exists(t.Context(), l.Key("order:6")).Val(); n != 0 {
		t.Fatal("lock key still present after ReleaseWith")
	}
	if n := rdb.ZCard(t.Context(), slots).Val(); n != 0 {
		t.Fatalf("the write given to ReleaseWith did not run: %d members left", n)
	}
	if !errors.Is(lease.Err(), lock.ErrReleased) {
		t.Fatalf("Err() after ReleaseWith = %v, want ErrReleased", lease.Err())
	}

	old := acquire(t, l, "order:7")
	if err := rdb.Del(t.Context(), l.Key("order:7")).Err(); err != nil {
		t.Fatal(err)
	}
	current := acquire(t, l, "order:7")
	owner := rdb.Get(t.Context(), l.Key("order:7")).Val()
	rdb.ZAdd(t.Context(), slots, redis.Z{Score: 1, Member: "holder-2"})
	if _, err := old.ReleaseWith(t.Context(), func(pipe redis.Pipeliner) { pipe.ZRem(t.Context(), slots, "holder-2") }); err != nil {
		t.Fatalf("ReleaseWith by the old owner: %v", err)
	}
	if got := rdb.Get(t.Context(), l.Key("order:7")).Val(); got != owner {
		t.Fatalf("new owner's key = %q after the old owner's ReleaseWith, want %q", got, owner)
	}
	if n := rdb.ZCard(t.Context(), slots).Val(); n != 0 {
		t.Fatalf("the old owner's write did not run: %d members left", n)
	}
	if err := current.Err(); err != nil {
		t.Fatalf("new owner's lease ended: %v", err)
	}
}

func TestReleaseByNonOwnerDoesNothing(t *testing.T) {
	t.Parallel()
	rdb := testkit.Redis(t)
	prefix := testkit.Prefix()
	a := newLocker(t, rdb, lock.Options{Prefix: prefix, TTL: 20 * time.Second})
	b := newLocker(t, rdb, lock.Options{Prefix: prefix, TTL: 20 * time.Second})
	old := acquire(t, a, "order:5")

	// The key passes to B behind A's back (as after an expiry).
	if err := rdb.Del(t.Context(), a.Key("order:5")).Err(); err != nil {
		t.Fatal(err)
	}
	current := acquire(t, b, "order:5")
	owner := rdb.Get(t.Context(), b.Key("order:5")).Val()

	if err := old.Release(t.Context()); err != nil {
		t.Fatalf("Release by the old owner: %v", err)
	}
	if got := rdb.Get(t.Context(), b.Key("order:5")).Val(); got != owner || got == "" {
		t.Fatalf("new owner's key = %q after the old owner's Release, want %q", got, owner)
	}
	if err := current.Err(); err != nil {
		t.Fatalf("new owner's lease ended: %v", err)
	}
}

func TestRenewalKeepsLeaseAlivePastTTL(t *testing.T) {
	t.Parallel()
	rdb := testkit.Redis(t)
	const ttl = 3 * time.Second
	var renewals atomic.Int64
	l := newLocker(t, rdb, lock.Options{
		Prefix:    testkit.Prefix(),
		TTL:       ttl,
		OnRenewed: func(string) { renewals.Add(1) },
	})
	lease := acquire(t, l, "order:6")
	start := time.Now()
	testkit.Eventually(t, "4 renewals", 30*time.Second, func() bool { return renewals.Load() >= 4 })
	if time.Since(start) < ttl {
		t.Fatalf("4 renewals within one TTL: the lease renews far too often")
	}
	if err := lease.Err(); err != nil {
		t.Fatalf("lease ended though renewed: %v", err)
	}
	if pttl := rdb.PTTL(t.Context(), l.Key("order:6")).Val(); pttl <= 0 {
		t.Fatalf("PTTL = %s after %s, want the key alive", pttl, time.Since(start))
	}
}

func TestLeaseLost(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// interfere takes the key away from the lease.
		interfere func(ctx context.Context, rdb *redis.Client, key string) error
		// wantValue is what the key must hold afterwards ("" = absent).
		wantValue string
	}{
		{
			name: "key deleted",
			interfere: func(ctx context.Context, rdb *redis.Client, key string) error {
				return rdb.Del(ctx, key).Err()
			},
		},
		{
			name: "key stolen",
			interfere: func(ctx context.Context, rdb *redis.Client, key string) error {
				return rdb.Set(ctx, key, "thief", time.Minute).Err()
			},
			wantValue: "thief",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rdb := testkit.Redis(t)
			lost := make(chan error, 2)
			l := newLocker(t, rdb, lock.Options{
				Prefix: testkit.Prefix(),
				TTL:    900 * time.Millisecond,
				OnLost: func(_ string, cause error) { lost <- cause },
			})
			lease := acquire(t, l, "order:7")
			if err := tt.interfere(t.Context(), rdb, lease.Key()); err != nil {
				t.Fatal(err)
			}
			select {
			case <-lease.Context().Done():
			case <-time.After(30 * time.Second):
				t.Fatal("lease context still alive long after its key was taken")
			}
			if !errors.Is(lease.Err(), lock.ErrLost) {
				t.Fatalf("cause = %v, want ErrLost", lease.Err())
			}
			if err := lease.Release(t.Context()); err != nil {
				t.Fatalf("Release of a lost lease: %v", err)
			}
			if got, _ := rdb.Get(t.Context(), lease.Key()).Result(); got != tt.wantValue {
				t.Fatalf("key = %q after the lost lease's Release, want %q", got, tt.wantValue)
			}
			if len(lost) != 1 {
				t.Fatalf("OnLost called %d times, want 1", len(lost))
			}
		})
	}
}

func TestRenewalFailureCancelsLease(t *testing.T) {
	t.Parallel()
	opt, err := redis.ParseURL(testkit.RedisURL(t))
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	l := newLocker(t, rdb, lock.Options{Prefix: testkit.Prefix(), TTL: 900 * time.Millisecond})
	lease, err := l.Acquire(t.Context(), "order:8")
	if err != nil {
		t.Fatal(err)
	}
	_ = rdb.Close() // every renewal now fails
	select {
	case <-lease.Context().Done():
	case <-time.After(30 * time.Second):
		t.Fatal("lease context still alive though Redis is unreachable")
	}
	if !errors.Is(lease.Err(), lock.ErrLost) {
		t.Fatalf("cause = %v, want ErrLost", lease.Err())
	}
	if err := lease.Release(t.Context()); err == nil {
		t.Fatal("Release through a closed client reported success")
	}
}

func TestPausedRenewalsLoseTheLease(t *testing.T) {
	t.Parallel()
	rdb := testkit.Redis(t)
	prefix := testkit.Prefix()
	resume := make(chan struct{})
	paused := make(chan struct{}, 1)
	a := newLocker(t, rdb, lock.Options{
		Prefix: prefix,
		TTL:    600 * time.Millisecond,
		BeforeRenew: func(ctx context.Context, _ string) {
			select {
			case paused <- struct{}{}:
			default:
			}
			select {
			case <-resume:
			case <-ctx.Done():
			}
		},
	})
	b := newLocker(t, rdb, lock.Options{Prefix: prefix, TTL: 20 * time.Second, Wait: time.Minute, RetryInterval: 20 * time.Millisecond})
	stale := acquire(t, a, "order:9")
	<-paused

	// Redis lets the key go, so B gets it; A's context ends on its own.
	next := acquire(t, b, "order:9")
	select {
	case <-stale.Context().Done():
	case <-time.After(30 * time.Second):
		t.Fatal("paused lease's context still alive after its TTL")
	}
	if !errors.Is(stale.Err(), lock.ErrLost) {
		t.Fatalf("cause = %v, want ErrLost", stale.Err())
	}
	close(resume)
	if err := stale.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := next.Err(); err != nil {
		t.Fatalf("new owner's lease ended after the stale owner resumed: %v", err)
	}
	if n := rdb.Exists(t.Context(), b.Key("order:9")).Val(); n != 1 {
		t.Fatal("stale owner's Release deleted the new owner's key")
	}
}

func TestAbandonLeavesKeyToExpire(t *testing.T) {
	t.Parallel()
	rdb := testkit.Redis(t)
	prefix := testkit.Prefix()
	l := newLocker(t, rdb, lock.Options{Prefix: prefix, TTL: 3 * time.Second})
	lease := acquire(t, l, "order:10")
	lease.Abandon()
	if !errors.Is(lease.Err(), lock.ErrAbandoned) {
		t.Fatalf("cause = %v, want ErrAbandoned", lease.Err())
	}
	if _, err := l.Acquire(t.Context(), "order:10"); !errors.Is(err, lock.ErrBusy) {
		t.Fatalf("Acquire right after Abandon: %v, want ErrBusy", err)
	}
	testkit.Eventually(t, "the abandoned key to expire", 30*time.Second, func() bool {
		return rdb.Exists(t.Context(), l.Key("order:10")).Val() == 0
	})
	acquire(t, l, "order:10")
}

func TestLeaseEndsWithAcquireContext(t *testing.T) {
	t.Parallel()
	rdb := testkit.Redis(t)
	l := newLocker(t, rdb, lock.Options{Prefix: testkit.Prefix(), TTL: 300 * time.Millisecond})
	ctx, cancel := context.WithCancel(t.Context())
	lease, err := l.Acquire(ctx, "order:11")
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	<-lease.Context().Done()
	testkit.Eventually(t, "the key to expire without renewals", 30*time.Second, func() bool {
		return rdb.Exists(t.Context(), l.Key("order:11")).Val() == 0
	})
	if err := lease.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// TestCluster runs a lease's whole life on a Redis Cluster: the key's hash
// tag puts it in one slot, and every command and script routes there.
func TestCluster(t *testing.T) {
	t.Parallel()
	rdb := testkit.RedisCluster(t)
	var renewals atomic.Int64
	l := newLocker(t, rdb, lock.Options{
		Prefix:    testkit.Prefix(),
		TTL:       3 * time.Second,
		OnRenewed: func(string) { renewals.Add(1) },
	})
	lease := acquire(t, l, "order:12")
	if _, err := l.Acquire(t.Context(), "order:12"); !errors.Is(err, lock.ErrBusy) {
		t.Fatalf("second Acquire on the cluster: %v, want ErrBusy", err)
	}
	testkit.Eventually(t, "renewals past the TTL", 30*time.Second, func() bool { return renewals.Load() >= 4 || lease.Err() != nil })
	if err := lease.Err(); err != nil {
		t.Fatalf("lease ended on the cluster after %d renewals: %v", renewals.Load(), err)
	}
	if err := lease.Release(t.Context()); err != nil {
		t.Fatalf("Release on the cluster: %v", err)
	}
	if n := rdb.Exists(t.Context(), l.Key("order:12")).Val(); n != 0 {
		t.Fatal("key still present after Release on the cluster")
	}

	stolen := acquire(t, l, "order:12")
	if err := rdb.Set(t.Context(), stolen.Key(), "thief", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-stolen.Context().Done():
	case <-time.After(30 * time.Second):
		t.Fatal("stolen lease still alive on the cluster")
	}
	if err := stolen.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := rdb.Get(t.Context(), stolen.Key()).Val(); got != "thief" {
		t.Fatalf("key = %q after the stolen lease's Release, want the thief's", got)
	}
	rdb.Del(t.Context(), stolen.Key())
}

// doOnly is a Client that cannot pipeline.
type doOnly struct{ lock.Client }

// Held says which locks are held, through a client that pipelines and
// through one that does not; a released lock is no longer held.
func TestHeld(t *testing.T) {
	t.Parallel()
	rdb := testkit.Redis(t)
	opts := lock.Options{Prefix: testkit.Prefix(), TTL: 20 * time.Second}
	l := newLocker(t, rdb, opts)
	a := acquire(t, l, "account:a")
	acquire(t, l, "account:c")
	for name, probe := range map[string]*lock.Locker{"pipelined": l, "one by one": newLocker(t, doOnly{rdb}, opts)} {
		got, err := probe.Held(t.Context(), []string{"account:a", "account:b", "account:c"})
		if err != nil || !slices.Equal(got, []bool{true, false, true}) {
			t.Fatalf("%s: Held = %v, %v; want [true false true]", name, got, err)
		}
	}
	if err := a.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got, err := l.Held(t.Context(), []string{"account:a"}); err != nil || got[0] {
		t.Fatalf("after release: Held = %v, %v; want [false]", got, err)
	}
	if got, err := l.Held(t.Context(), nil); err != nil || len(got) != 0 {
		t.Fatalf("no resources: Held = %v, %v", got, err)
	}
}
