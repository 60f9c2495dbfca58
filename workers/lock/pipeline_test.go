package lock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/workers/lock"
)

// trips counts the lock's round trips as go-redis sends them, and can hold
// them at the client until the test lets them go.
type trips struct {
	mu   sync.Mutex
	sent [][]string // the lock's commands of each round trip, by name
	hold chan struct{}
}

func (*trips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (tr *trips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		tr.record([]redis.Cmder{cmd})
		return next(ctx, cmd)
	}
}

func (tr *trips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if hold := tr.record(cmds); hold != nil {
			<-hold
		}
		return next(ctx, cmds)
	}
}

// record notes a round trip that carries lock commands; a connection's
// handshake (HELLO, CLIENT SETINFO) is not one of them.
func (tr *trips) record(cmds []redis.Cmder) chan struct{} {
	var names []string
	for _, c := range cmds {
		if n := c.Name(); n == "set" || n == "evalsha" || n == "eval" {
			names = append(names, n)
		}
	}
	if names == nil {
		return nil
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.sent = append(tr.sent, names)
	return tr.hold
}

// holdAll makes the round trips that start from now wait until the
// function it returns is called, or the test ends.
func (tr *trips) holdAll(t *testing.T) (letGo func()) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	hold := make(chan struct{})
	tr.hold = hold
	letGo = sync.OnceFunc(func() {
		tr.pass()
		close(hold)
	})
	t.Cleanup(letGo)
	return letGo
}

// pass lets the round trips that start from now go through.
func (tr *trips) pass() {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.hold = nil
}

// sizes returns how many lock commands each round trip since the
// mark'th carried.
func (tr *trips) sizes(mark int) []int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var n []int
	for _, s := range tr.sent[mark:] {
		n = append(n, len(s))
	}
	return n
}

func (tr *trips) count() int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return len(tr.sent)
}

// countedLocker returns a Locker on a client of its own whose round trips
// tr counts, its scripts already loaded in Redis.
func countedLocker(t testing.TB) (*lock.Locker, *redis.Client, *trips) {
	t.Helper()
	rdb := testkit.Redis(t)
	tr := &trips{}
	rdb.AddHook(tr)
	l := newLocker(t, rdb, lock.Options{Prefix: testkit.Prefix(), TTL: time.Minute})
	t.Cleanup(l.Wait)
	// Load the scripts, so that no round trip in the test retries one
	// after NOSCRIPT.
	lease, err := l.Acquire(t.Context(), "warm")
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	return l, rdb, tr
}

// waitQueued waits until n of l's commands wait for a round trip.
func waitQueued(t *testing.T, l *lock.Locker, n int) {
	t.Helper()
	testkit.Eventually(t, fmt.Sprintf("%d commands queued", n), 15*time.Second, func() bool { return lock.Queued(l) == n })
}

// waitHeldAndQueued waits until the Locker's round trip (the first since
// the mark'th) is held at the client and each of calls commands is in it
// or queued behind it.
func waitHeldAndQueued(t *testing.T, l *lock.Locker, tr *trips, mark, calls int) {
	t.Helper()
	testkit.Eventually(t, "a round trip held, the other commands queued", 15*time.Second, func() bool {
		sizes := tr.sizes(mark)
		return len(sizes) == 1 && sizes[0]+lock.Queued(l) == calls
	})
}

// Concurrent Acquires, then concurrent Releases, that queue up while a
// round trip is on the wire share the next round trip, and each still gets
// its own answer.
func TestConcurrentCallsShareRoundTrips(t *testing.T) {
	t.Parallel()
	l, rdb, tr := countedLocker(t)
	const jobs = 20
	leases := make([]*lock.Lease, jobs)
	errs := make([]error, jobs)

	// The first calls take the Locker's round trip, held at the client;
	// the others queue behind it and go out together.
	mark := tr.count()
	letGo := tr.holdAll(t)
	var wg sync.WaitGroup
	for i := range jobs {
		wg.Go(func() { leases[i], errs[i] = l.Acquire(t.Context(), fmt.Sprint("order:", i)) })
	}
	waitHeldAndQueued(t, l, tr, mark, jobs)
	letGo()
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Acquire #%d: %v", i, err)
		}
		if got := rdb.Get(t.Context(), l.Key(fmt.Sprint("order:", i))).Val(); got == "" {
			t.Fatalf("order:%d has no lock key after its Acquire", i)
		}
	}
	if got := tr.sizes(mark); len(got) > 2 || sum(got) != jobs {
		t.Fatalf("%d Acquires went out in round trips of %v commands, want all of them in at most 2", jobs, got)
	}

	mark = tr.count()
	letGo = tr.holdAll(t)
	for i := range jobs {
		wg.Go(func() { errs[i] = leases[i].Release(t.Context()) })
	}
	waitHeldAndQueued(t, l, tr, mark, jobs)
	letGo()
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Release #%d: %v", i, err)
		}
		if n := rdb.Exists(t.Context(), l.Key(fmt.Sprint("order:", i))).Val(); n != 0 {
			t.Fatalf("order:%d still locked after its Release", i)
		}
	}
	if got := tr.sizes(mark); len(got) > 2 || sum(got) != jobs {
		t.Fatalf("%d Releases went out in round trips of %v commands, want all of them in at most 2", jobs, got)
	}
}

// A lone call goes out at once, in a round trip of its own: it waits for
// no other call, not even while another round trip is on the wire.
func TestLoneCallIsNotDelayed(t *testing.T) {
	t.Parallel()
	l, _, tr := countedLocker(t)

	mark := tr.count()
	lease, err := l.Acquire(t.Context(), "order:1")
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := tr.sizes(mark); !slices.Equal(got, []int{1, 1}) {
		t.Fatalf("a lone Acquire and Release went out in round trips of %v commands, want [1 1]", got)
	}

	// A call that arrives while a round trip is held on the wire goes
	// out in the very next one, alone: it waits for the wire, never for
	// company.
	mark = tr.count()
	letGo := tr.holdAll(t)
	held := make(chan error, 1)
	go func() {
		_, err := l.Acquire(t.Context(), "order:2")
		held <- err
	}()
	testkit.Eventually(t, "the first Acquire on the wire", 15*time.Second, func() bool { return tr.count() == mark+1 })
	tr.pass()
	next := make(chan error, 1)
	go func() {
		_, err := l.Acquire(t.Context(), "order:3")
		next <- err
	}()
	waitQueued(t, l, 1)
	letGo()
	for _, done := range []chan error{held, next} {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if got := tr.sizes(mark); !slices.Equal(got, []int{1, 1}) {
		t.Fatalf("an Acquire held on the wire and the one behind it went out in round trips of %v commands, want [1 1]", got)
	}
}

// A caller whose context ends while its command is queued returns at
// once. Its Acquire is dropped, never sent; its Release is sent all the
// same, so the resource is free without waiting for the TTL.
func TestQueuedCallersLeave(t *testing.T) {
	t.Parallel()
	l, rdb, _ := countedLocker(t)
	tr := &trips{}
	rdb.AddHook(tr)
	toRelease, err := l.Acquire(t.Context(), "order:w")
	if err != nil {
		t.Fatal(err)
	}

	// A round trip held on the wire.
	mark := tr.count()
	letGo := tr.holdAll(t)
	var onWire *lock.Lease
	var wg sync.WaitGroup
	wg.Go(func() {
		var err error
		if onWire, err = l.Acquire(t.Context(), "order:0"); err != nil {
			t.Errorf("held Acquire: %v", err)
		}
	})
	testkit.Eventually(t, "a round trip on the wire", 15*time.Second, func() bool { return tr.count() == mark+1 })

	ctx, cancel := context.WithCancel(t.Context())
	acquired := make(chan error, 1)
	go func() {
		_, err := l.Acquire(ctx, "order:z")
		acquired <- err
	}()
	waitQueued(t, l, 1)
	rctx, rcancel := context.WithCancel(t.Context())
	released := make(chan error, 1)
	go func() { released <- toRelease.Release(rctx) }()
	waitQueued(t, l, 2)
	cancel()
	rcancel()
	if err := <-acquired; !errors.Is(err, context.Canceled) {
		t.Fatalf("queued Acquire whose context ended: %v, want context.Canceled", err)
	}
	if err := <-released; !errors.Is(err, context.Canceled) {
		t.Fatalf("queued Release whose context ended: %v, want context.Canceled", err)
	}

	letGo()
	wg.Wait()
	l.Wait()
	if n := rdb.Exists(t.Context(), l.Key("order:z")).Val(); n != 0 {
		t.Fatal("the Acquire whose caller left was sent: order:z is locked for nobody")
	}
	if n := rdb.Exists(t.Context(), toRelease.Key()).Val(); n != 0 {
		t.Fatal("the Release whose caller left was not sent: order:w stays locked until its TTL")
	}
	if onWire != nil {
		_ = onWire.Release(t.Context())
	}
}

func sum(s []int) int {
	n := 0
	for _, v := range s {
		n += v
	}
	return n
}

// On a Redis Cluster, a pipeline of lock commands spans slots: go-redis
// splits it by node, and every concurrent Acquire and Release still gets
// its own answer.
func TestClusterPipelinesSpanSlots(t *testing.T) {
	t.Parallel()
	rdb := testkit.RedisCluster(t)
	l := newLocker(t, rdb, lock.Options{Prefix: testkit.Prefix(), TTL: time.Minute})
	t.Cleanup(l.Wait)
	const jobs = 30
	resources := make([]string, jobs)
	leases := make([]*lock.Lease, jobs)
	errs := make([]error, jobs)
	for i := range resources {
		resources[i] = fmt.Sprint("order:", i)
	}
	var wg sync.WaitGroup
	for i := range jobs {
		wg.Go(func() { leases[i], errs[i] = l.Acquire(t.Context(), resources[i]) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("Acquire on the cluster: %v", err)
	}
	held, err := l.Held(t.Context(), resources)
	if err != nil || slices.Contains(held, false) {
		t.Fatalf("after the Acquires: Held = %v, %v; want all held", held, err)
	}
	for i := range jobs {
		wg.Go(func() { errs[i] = leases[i].Release(t.Context()) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("Release on the cluster: %v", err)
	}
	held, err = l.Held(t.Context(), resources)
	if err != nil || slices.Contains(held, true) {
		t.Fatalf("after the Releases: Held = %v, %v; want none held", held, err)
	}
}
