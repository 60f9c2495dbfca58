package redisstore

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/idemgate/idemgate/middleware/idempotency"
)

// TestPipelinesShareRoundTrips: concurrent claims and completions, with
// duplicates among them, share round trips, and each key is still claimed
// exactly once and completed by its owner.
func TestPipelinesShareRoundTrips(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t)
	prefix := testenv.Prefix()
	s := New(rdb, WithPrefix(prefix), WithPipelining(2, 32))
	t.Cleanup(func() {
		_ = s.Close()
		var keys []string
		it := rdb.Scan(t.Context(), 0, prefix+"*", 1000).Iterator()
		for it.Next(t.Context()) {
			keys = append(keys, it.Val())
		}
		if len(keys) > 0 {
			rdb.Del(t.Context(), keys...)
		}
	})
	ctx := t.Context()
	const keys, dups = 100, 3
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		claimed = map[string]int{}
		errs    []error
	)
	for k := range keys {
		for d := range dups {
			wg.Go(func() {
				sc := idempotency.Scope{Tenant: "t", Route: "r", Key: fmt.Sprint("k", k)}
				owner := fmt.Sprint("o", k, "-", d)
				res, err := s.Claim(ctx, idempotency.ClaimRequest{Scope: sc, Fingerprint: "fp", Owner: owner, Lease: time.Minute, Retention: time.Hour})
				if err == nil && res.Claimed {
					err = s.Complete(ctx, sc, owner, idempotency.Response{Status: 201, Body: []byte(owner)}, time.Hour)
				}
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, err)
				} else if res.Claimed {
					claimed[sc.Key]++
				}
			})
		}
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d errors, first: %v", len(errs), errs[0])
	}
	for k := range keys {
		sc := idempotency.Scope{Tenant: "t", Route: "r", Key: fmt.Sprint("k", k)}
		if claimed[sc.Key] != 1 {
			t.Fatalf("%s claimed %d times, want once", sc.Key, claimed[sc.Key])
		}
		if rec, err := s.Get(ctx, sc); err != nil || rec.State != idempotency.StateCompleted {
			t.Fatalf("%s: %+v %v, want completed", sc.Key, rec, err)
		}
	}
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
	rdb := testenv.Redis(t)
	var nonce [8]byte
	_, _ = rand.Read(nonce[:])
	// A body no server has cached: its SHA is unknown everywhere.
	script := redis.NewScript("return ARGV[1] -- " + hex.EncodeToString(nonce[:]))
	p := &pipeliner{client: rdb, max: 64, slots: 1}
	var wg sync.WaitGroup
	got := make([]string, 20)
	errs := make([]error, 20)
	for i := range got {
		wg.Go(func() { got[i], errs[i] = p.run(script, nil, fmt.Sprint("v", i)).Text() })
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
