package receiver

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgate/idemgate/internal/testkit"
)

// newDB is a schema of the test's own with the receiver's tables and an
// effects table the business functions write to.
func newDB(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool := testkit.Pool(t)
	if err := EnsureSchema(t.Context(), pool); err != nil {
		t.Fatal(err)
	}
	if err := EnsureSchema(t.Context(), pool); err != nil {
		t.Fatalf("EnsureSchema again: %v", err)
	}
	_, err := pool.Exec(t.Context(), `
CREATE TABLE effects (
    id     bigserial PRIMARY KEY,
    tenant text NOT NULL,
    key    text NOT NULL,
    token  bigint NOT NULL
)`)
	if err != nil {
		t.Fatal(err)
	}
	return pool
}

func delivery(tenant, key string, token int64) Delivery {
	return Delivery{Type: "shipment.book", JobID: "job_" + key, Tenant: tenant, BusinessKey: key, Attempt: 1, FencingToken: token}
}

// effect writes one effects row per call and counts its calls: whatever
// keeps the effect single is Apply, not the function.
func effect(d Delivery, calls *atomic.Int64) func(context.Context, pgx.Tx) (string, error) {
	return func(ctx context.Context, tx pgx.Tx) (string, error) {
		calls.Add(1)
		var id int64
		err := tx.QueryRow(ctx, `INSERT INTO effects (tenant, key, token) VALUES ($1, $2, $3) RETURNING id`,
			d.Tenant, d.BusinessKey, d.FencingToken).Scan(&id)
		return fmt.Sprintf("eff_%d", id), err
	}
}

func count(t *testing.T, pool *pgxpool.Pool, query string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(t.Context(), query, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func effects(t *testing.T, pool *pgxpool.Pool, tenant, key string) int {
	t.Helper()
	return count(t, pool, `SELECT count(*) FROM effects WHERE tenant = $1 AND key = $2`, tenant, key)
}

func TestApplyOncePerKey(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	d := delivery("acme", "shipment:o-1", 3)
	var calls atomic.Int64

	const n = 20
	type outcome struct {
		ref      string
		replayed bool
		err      error
	}
	out := make([]outcome, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			ref, replayed, err := Apply(t.Context(), pool, d, "order:o-1", effect(d, &calls))
			out[i] = outcome{ref, replayed, err}
		})
	}
	close(start)
	wg.Wait()

	if got := calls.Load(); got != 1 {
		t.Fatalf("fn ran %d times for one key, want 1", got)
	}
	if got := effects(t, pool, "acme", "shipment:o-1"); got != 1 {
		t.Fatalf("%d effects for one key, want 1", got)
	}
	replays := 0
	for i, o := range out {
		if o.err != nil {
			t.Fatalf("delivery %d: %v", i, o.err)
		}
		if o.ref != out[0].ref || o.ref == "" {
			t.Fatalf("delivery %d got result_ref %q, delivery 0 got %q", i, o.ref, out[0].ref)
		}
		if o.replayed {
			replays++
		}
	}
	if replays != n-1 {
		t.Fatalf("%d deliveries replayed, want %d", replays, n-1)
	}
}

func TestApplyFence(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	var calls atomic.Int64
	apply := func(key string, token int64) (string, bool, error) {
		d := delivery("acme", key, token)
		return Apply(t.Context(), pool, d, "order:o-1", effect(d, &calls))
	}

	if _, _, err := apply("shipment:o-1#2", 5); err != nil {
		t.Fatal(err)
	}

	t.Run("stale token refused, nothing written", func(t *testing.T) {
		before := calls.Load()
		_, _, err := apply("shipment:o-1#1", 4)
		var stale *StaleError
		if !errors.Is(err, ErrStale) || !errors.As(err, &stale) {
			t.Fatalf("Apply with token 4 after 5 = %v, want a *StaleError", err)
		}
		if stale.Token != 4 || stale.Latest != 5 || stale.Tenant != "acme" || stale.Resource != "order:o-1" {
			t.Fatalf("StaleError = %+v, want token 4, latest 5, acme, order:o-1", stale)
		}
		if calls.Load() != before {
			t.Fatal("fn ran for a stale token")
		}
		if n := effects(t, pool, "acme", "shipment:o-1#1"); n != 0 {
			t.Fatalf("%d effects for the stale delivery", n)
		}
		if n := count(t, pool, `SELECT count(*) FROM idemgate_deliveries WHERE idempotency_key = 'shipment:o-1#1'`); n != 0 {
			t.Fatal("the stale delivery was recorded")
		}
		if n := count(t, pool, `SELECT fencing_token FROM idemgate_fences WHERE tenant = 'acme' AND resource = 'order:o-1'`); n != 5 {
			t.Fatalf("fence token after a refusal = %d, want 5", n)
		}
	})

	t.Run("stale token refused even for an applied key", func(t *testing.T) {
		if _, _, err := apply("shipment:o-1#2", 4); !errors.Is(err, ErrStale) {
			t.Fatalf("repeat with an older token = %v, want ErrStale", err)
		}
	})

	t.Run("equal token passes", func(t *testing.T) {
		ref, replayed, err := apply("shipment:o-1#3", 5)
		if err != nil || replayed || ref == "" {
			t.Fatalf("Apply with the applied token = %q, %v, %v; want a new effect", ref, replayed, err)
		}
	})

	t.Run("newer token passes and advances the fence", func(t *testing.T) {
		if _, _, err := apply("shipment:o-1#4", 6); err != nil {
			t.Fatal(err)
		}
		if _, _, err := apply("shipment:o-1#5", 5); !errors.Is(err, ErrStale) {
			t.Fatalf("token 5 after 6 = %v, want ErrStale", err)
		}
	})

	t.Run("the fence is per resource", func(t *testing.T) {
		d := delivery("acme", "shipment:o-2", 1)
		if _, _, err := Apply(t.Context(), pool, d, "order:o-2", effect(d, &calls)); err != nil {
			t.Fatalf("token 1 on another resource: %v", err)
		}
	})
}

func TestApplyReplay(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	var calls atomic.Int64
	d := delivery("acme", "shipment:o-1", 1)
	first, replayed, err := Apply(t.Context(), pool, d, "", effect(d, &calls))
	if err != nil || replayed {
		t.Fatalf("first Apply = %q, %v, %v", first, replayed, err)
	}
	retry := delivery("acme", "shipment:o-1", 2) // a later attempt took the lock again
	again, replayed, err := Apply(t.Context(), pool, retry, "", effect(retry, &calls))
	if err != nil || !replayed || again != first {
		t.Fatalf("repeat Apply = %q, %v, %v; want %q replayed", again, replayed, err, first)
	}
	if calls.Load() != 1 {
		t.Fatalf("fn ran %d times, want 1", calls.Load())
	}
	// resource "" is the business key.
	if n := count(t, pool, `SELECT fencing_token FROM idemgate_fences WHERE tenant = 'acme' AND resource = 'shipment:o-1'`); n != 2 {
		t.Fatalf("fence on the business key = %d, want 2", n)
	}
}

func TestApplyRollsBackOnError(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	var calls atomic.Int64
	d := delivery("acme", "shipment:o-1", 9)
	boom := errors.New("carrier unavailable")
	_, _, err := Apply(t.Context(), pool, d, "order:o-1", func(ctx context.Context, tx pgx.Tx) (string, error) {
		if _, err := effect(d, &calls)(ctx, tx); err != nil {
			return "", err
		}
		return "", boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Apply = %v, want fn's error", err)
	}
	if n := effects(t, pool, "acme", "shipment:o-1"); n != 0 {
		t.Fatalf("fn's write survived its error: %d effects", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM idemgate_deliveries`); n != 0 {
		t.Fatal("a failed delivery was recorded")
	}
	if n := count(t, pool, `SELECT count(*) FROM idemgate_fences`); n != 0 {
		t.Fatal("a failed delivery moved the fence")
	}

	ref, replayed, err := Apply(t.Context(), pool, d, "order:o-1", effect(d, &calls))
	if err != nil || replayed || ref == "" {
		t.Fatalf("retry after the error = %q, %v, %v; want it applied", ref, replayed, err)
	}
	if n := effects(t, pool, "acme", "shipment:o-1"); n != 1 {
		t.Fatalf("%d effects after the retry, want 1", n)
	}
}

func TestApplyTenantsAreSeparate(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	var calls atomic.Int64
	refs := map[string]string{}
	for _, tenant := range []string{"acme", "globex"} {
		// Same key, same resource, and globex's token is lower: the
		// tenants share neither the key nor the fence.
		d := delivery(tenant, "shipment:o-1", map[string]int64{"acme": 7, "globex": 1}[tenant])
		ref, replayed, err := Apply(t.Context(), pool, d, "order:o-1", effect(d, &calls))
		if err != nil || replayed {
			t.Fatalf("%s: Apply = %q, %v, %v; want a new effect", tenant, ref, replayed, err)
		}
		refs[tenant] = ref
	}
	if refs["acme"] == refs["globex"] {
		t.Fatalf("two tenants got one result_ref %q", refs["acme"])
	}
	for _, tenant := range []string{"acme", "globex"} {
		if n := effects(t, pool, tenant, "shipment:o-1"); n != 1 {
			t.Fatalf("%s: %d effects, want 1", tenant, n)
		}
	}
}

func TestApplyEmptyKey(t *testing.T) {
	t.Parallel()
	_, _, err := Apply(t.Context(), nil, delivery("acme", "", 1), "", nil)
	if !errors.Is(err, ErrEnvelope) {
		t.Fatalf("Apply without a key = %v, want ErrEnvelope", err)
	}
}
