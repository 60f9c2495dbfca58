package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/internal/testkit/faultproxy"
	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/middleware/idempotency/idempotencytest"
)

// deletePrefix deletes the keys under prefix. It runs in cleanups, where
// the test's context has ended already.
func deletePrefix(rdb *redis.Client, prefix string) {
	ctx := context.Background()
	var keys []string
	it := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	for it.Next(ctx) {
		keys = append(keys, it.Val())
	}
	if len(keys) > 0 {
		rdb.Del(ctx, keys...)
	}
}

// TestPipelinesShareRoundTrips: concurrent claims and completions, with
// duplicates among them, share round trips, and each key is still claimed
// exactly once and completed by its owner.
func TestPipelinesShareRoundTrips(t *testing.T) {
	t.Parallel()
	rdb := testkit.Redis(t)
	prefix := testkit.Prefix()
	s := New(rdb, WithPrefix(prefix), WithPipelining(2, 32))
	t.Cleanup(func() { _ = s.Close(); deletePrefix(rdb, prefix) })
	const keys, dups = 100, 3
	idempotencytest.ClaimCompleteLoad(t, s, keys, dups)
	// Every slot was given back and nothing is left queued.
	s.pipe.mu.Lock()
	sending, queued := s.pipe.sending, len(s.pipe.queue)
	s.pipe.mu.Unlock()
	if sending != 0 || queued != 0 {
		t.Fatalf("after the calls: %d pipelines marked on the wire, %d calls queued; want 0, 0", sending, queued)
	}
	scripts, trips := s.pipe.scripts.Load(), s.pipe.trips.Load()
	t.Logf("%d scripts in %d round trips", scripts, trips)
	if scripts != keys*dups+keys {
		t.Fatalf("the pipeliner carried %d scripts, want %d", scripts, keys*dups+keys)
	}
	if trips >= scripts {
		t.Fatalf("%d scripts took %d round trips: nothing was shared", scripts, trips)
	}
}

// TestPipelineLoadsMissingScripts: a script the server has never seen
// fails with NOSCRIPT inside a pipeline; the pipeliner then loads and runs
// it, so every caller still gets its reply.
func TestPipelineLoadsMissingScripts(t *testing.T) {
	t.Parallel()
	rdb := testkit.Redis(t)
	var nonce [8]byte
	_, _ = rand.Read(nonce[:])
	// A body no server has cached: its SHA is unknown everywhere.
	script := redis.NewScript("return ARGV[1] -- " + hex.EncodeToString(nonce[:]))
	var f flights
	t.Cleanup(f.wait)
	p := &pipeliner{client: rdb, max: 64, slots: 1, flights: &f}
	var wg sync.WaitGroup
	got := make([]string, 20)
	errs := make([]error, 20)
	for i := range got {
		wg.Go(func() { got[i], errs[i] = p.run(t.Context(), script, false, nil, fmt.Sprint("v", i)).Text() })
	}
	wg.Wait()
	for i := range got {
		if errs[i] != nil || got[i] != fmt.Sprint("v", i) {
			t.Fatalf("call %d: %q %v, want %q", i, got[i], errs[i], fmt.Sprint("v", i))
		}
	}
	if p.trips.Load() >= p.scripts.Load() {
		t.Logf("no pipeline formed (%d trips for %d scripts); the NOSCRIPT path was not exercised", p.trips.Load(), p.scripts.Load())
	}
}

// bound is how long a test waits for something that must happen; generous
// on purpose.
const bound = 15 * time.Second

// TestPipelineDropsScriptsOfCallersGone: a script queued behind a pipeline
// that the network holds up, and whose caller gives up, is never sent, not
// even once the network answers again.
func TestPipelineDropsScriptsOfCallersGone(t *testing.T) {
	t.Parallel()
	rdb := testkit.Redis(t)
	proxy, err := faultproxy.New(rdb.Options().Addr)
	if err != nil {
		t.Fatal(err)
	}
	opt, err := redis.ParseURL(testkit.RedisURL(t))
	if err != nil {
		t.Fatal(err)
	}
	// The client's own timeouts are far longer than the test's deadlines.
	opt.Addr, opt.ReadTimeout, opt.WriteTimeout = proxy.Addr(), time.Minute, time.Minute
	proxied := redis.NewClient(opt)
	prefix := testkit.Prefix()
	s := New(proxied, WithPrefix(prefix), WithPipelining(1, 64))
	t.Cleanup(func() {
		proxy.Thaw()
		_ = s.Close()
		_ = proxied.Close()
		_ = proxy.Close()
		deletePrefix(rdb, prefix)
	})
	req := func(key string) idempotency.ClaimRequest {
		return idempotency.ClaimRequest{Scope: idempotency.Scope{Tenant: "t", Route: "r", Key: key}, Fingerprint: "fp", Owner: "o-" + key, Lease: time.Minute, Retention: time.Hour}
	}
	claim := func(ctx context.Context, key string) error {
		res, err := s.Claim(ctx, req(key))
		if err == nil && !res.Claimed {
			err = fmt.Errorf("%s not claimed: %+v", key, res.Record)
		}
		return err
	}
	if err := claim(t.Context(), "warm"); err != nil {
		t.Fatal(err)
	}

	proxy.Freeze()
	// a takes the only pipeline and waits on the frozen network...
	trips := s.pipe.trips.Load()
	aDone := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		aDone <- claim(ctx, "a")
	}()
	for deadline := time.Now().Add(bound); s.pipe.trips.Load() == trips; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("a's claim did not go out within %s", bound)
		}
	}
	// ...so b queues behind it, and gives up there.
	bDone := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		bDone <- claim(ctx, "b")
	}()
	for name, done := range map[string]chan error{"a": aDone, "b": bDone} {
		select {
		case err := <-done:
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("claim of %s on a frozen network: %v, want context.DeadlineExceeded", name, err)
			}
		case <-time.After(bound):
			t.Fatalf("claim of %s had not returned %s after its deadline", name, bound)
		}
	}

	proxy.Thaw()
	// c queues after b, so once c is claimed b's turn has passed.
	ctx, cancel := context.WithTimeout(t.Context(), bound)
	defer cancel()
	if err := claim(ctx, "c"); err != nil {
		t.Fatalf("claim once the network answers again: %v", err)
	}
	if rec, err := s.Get(ctx, req("b").Scope); !errors.Is(err, idempotency.ErrNotFound) {
		t.Fatalf("b, whose caller gave up before it was sent, was claimed after all: %+v, %v", rec, err)
	}
}
