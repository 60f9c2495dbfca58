package pgstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/internal/testkit/faultproxy"
	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/middleware/idempotency/idempotencytest"
)

// proxiedPool returns a pool of at most four connections, on a migrated
// schema of the test's own, whose every connection goes through the
// returned proxy. configure, when not nil, adjusts the pool's config.
func proxiedPool(t *testing.T, configure func(*pgxpool.Config)) (*pgxpool.Pool, *faultproxy.Proxy) {
	t.Helper()
	return testkit.ProxiedPool(t, testkit.Postgres(t), configure)
}

// returns calls fn in a goroutine and returns its error, failing the test
// when fn has not returned within waitFor.
func returns(t *testing.T, what string, fn func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		return err
	case <-time.After(waitFor):
		t.Fatalf("%s had not returned after %s", what, waitFor)
		return nil
	}
}

// withDeadline is returns for a call bounded by a context whose deadline is
// d away.
func withDeadline(t *testing.T, what string, d time.Duration, fn func(ctx context.Context) error) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return returns(t, what, func() error { return fn(ctx) })
}

func claimReq(key, owner string) idempotency.ClaimRequest {
	return idempotency.ClaimRequest{
		Scope: idempotency.Scope{Tenant: "t", Route: "r", Key: key}, Fingerprint: "fp", Owner: owner,
		Lease: time.Minute, Retention: time.Hour,
	}
}

// TestCallsEndAtTheirDeadline: when the network to PostgreSQL stops
// answering, a call returns its context's error at the context's deadline,
// and once the network answers again the store works again: the pool drops
// the connections whose statements were given up and opens new ones.
func TestCallsEndAtTheirDeadline(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []Option
	}{
		{"batched", nil},
		{"unbatched", []Option{WithBatching(0, 0)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool, proxy := proxiedPool(t, nil)
			s := New(pool, append(tc.opts, WithLogger(slog.New(slog.NewTextHandler(t.Output(), nil))))...)
			t.Cleanup(func() { proxy.Thaw(); s.Close() })
			held := claimReq("held", "owner")
			if res, err := s.Claim(t.Context(), held); err != nil || !res.Claimed {
				t.Fatalf("Claim: %+v, %v", res, err)
			}

			proxy.Freeze()
			for _, call := range []struct {
				name string
				fn   func(ctx context.Context) error
			}{
				{"Claim", func(ctx context.Context) error { _, err := s.Claim(ctx, claimReq("frozen", "o")); return err }},
				{"Renew", func(ctx context.Context) error { return s.Renew(ctx, held.Scope, "owner", time.Minute) }},
				{"Complete", func(ctx context.Context) error {
					return s.Complete(ctx, held.Scope, "owner", idempotency.Response{Status: 201}, time.Hour)
				}},
				{"Release", func(ctx context.Context) error { return s.Release(ctx, held.Scope, "owner") }},
				{"Get", func(ctx context.Context) error { _, err := s.Get(ctx, held.Scope); return err }},
			} {
				err := withDeadline(t, call.name, 300*time.Millisecond, call.fn)
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("%s on a frozen network: %v, want context.DeadlineExceeded", call.name, err)
				}
			}

			proxy.Thaw()
			// More concurrent calls than the pool has connections, so that
			// every connection, old or new, serves some.
			ctx, cancel := context.WithTimeout(t.Context(), waitFor)
			defer cancel()
			after := func(i int) idempotency.Scope { return claimReq(fmt.Sprint("after-", i), "o").Scope }
			if err := idempotencytest.ClaimCompleteEach(ctx, s, 16, after); err != nil {
				t.Fatalf("after the network came back: %v", err)
			}
		})
	}
}

// TestBatchGivesUpWithItsCallers: a batch held up by a network that stopped
// answering ends when its leader gives up, so the lane is free again
// while the network is still frozen, and a statement queued behind it
// whose caller gave up is never sent, not even once the network answers.
func TestBatchGivesUpWithItsCallers(t *testing.T) {
	t.Parallel()
	// No ping on acquire: the warm connection goes straight to a's batch,
	// so a's batch counts as sent before anything waits on the network.
	pool, proxy := proxiedPool(t, func(cfg *pgxpool.Config) {
		cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	})
	s := New(pool, WithBatching(1, 64), WithLogger(slog.New(slog.NewTextHandler(t.Output(), nil))))
	t.Cleanup(func() { proxy.Thaw(); s.Close() })
	if res, err := s.Claim(t.Context(), claimReq("warm", "o")); err != nil || !res.Claimed {
		t.Fatalf("Claim: %+v, %v", res, err)
	}

	proxy.Freeze()
	// a takes the only lane and waits on the frozen network...
	batches := s.batch.batches.Load()
	aDone := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := s.Claim(ctx, claimReq("a", "o"))
		aDone <- err
	}()
	for deadline := time.Now().Add(waitFor); s.batch.batches.Load() == batches; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("a's batch was not sent within %s", waitFor)
		}
	}
	// ...so b queues behind it, and gives up there.
	errB := withDeadline(t, "claim of b", 300*time.Millisecond, func(ctx context.Context) error {
		_, err := s.Claim(ctx, claimReq("b", "o"))
		return err
	})
	errA := returns(t, "claim of a", func() error { return <-aDone })
	for name, err := range map[string]error{"a": errA, "b": errB} {
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("claim of %s on a frozen network: %v, want context.DeadlineExceeded", name, err)
		}
	}
	// a handed the lane on before it returned: nothing holds it while the
	// network is still frozen, and b, which gave up, is not queued.
	if busy, queued := busyLanes(s.batch), pendingOps(s.batch); busy != 0 || queued != 0 {
		t.Fatalf("once its callers gave up: %d lanes busy, %d statements queued", busy, queued)
	}

	proxy.Thaw()
	ctx, cancel := context.WithTimeout(t.Context(), waitFor)
	defer cancel()
	if res, err := s.Claim(ctx, claimReq("c", "o")); err != nil || !res.Claimed {
		t.Fatalf("Claim once the network answers again: %+v, %v", res, err)
	}
	if rec, err := s.Get(ctx, claimReq("b", "o").Scope); !errors.Is(err, idempotency.ErrNotFound) {
		t.Fatalf("b, whose caller gave up before it was sent, was claimed after all: %+v, %v", rec, err)
	}
}

// TestBatchTimeoutFreesTheLane: callers without a deadline do not hold
// the lane on a network that stopped answering: their batch is given up
// at the batch timeout, so the lane is free while the network is still
// frozen, and each caller runs its statement again on its own, which
// succeeds once the network answers.
func TestBatchTimeoutFreesTheLane(t *testing.T) {
	t.Parallel()
	pool, proxy := proxiedPool(t, func(cfg *pgxpool.Config) {
		cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	})
	s := New(pool, WithBatching(1, 64), WithBatchTimeout(200*time.Millisecond),
		WithLogger(slog.New(slog.NewTextHandler(t.Output(), nil))))
	t.Cleanup(func() { proxy.Thaw(); s.Close() })
	if res, err := s.Claim(t.Context(), claimReq("warm", "o")); err != nil || !res.Claimed {
		t.Fatalf("Claim: %+v, %v", res, err)
	}

	proxy.Freeze()
	done := make(chan error, 2)
	claim := func(key string) {
		res, err := s.Claim(context.Background(), claimReq(key, "o"))
		if err == nil && !res.Claimed {
			err = fmt.Errorf("%s not claimed: %+v", key, res.Record)
		}
		done <- err
	}
	batches := s.batch.batches.Load()
	go claim("a")
	for deadline := time.Now().Add(waitFor); s.batch.batches.Load() == batches; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("a's batch was not sent within %s", waitFor)
		}
	}
	go claim("b") // queued behind a's batch, or leading one of its own
	eventually(t, "the lane is free on a frozen network", func() bool {
		return busyLanes(s.batch) == 0 && pendingOps(s.batch) == 0
	})

	proxy.Thaw()
	for range 2 {
		if err := returns(t, "a claim once the network answers again", func() error { return <-done }); err != nil {
			t.Fatal(err)
		}
	}
}
