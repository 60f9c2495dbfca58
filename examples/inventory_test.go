package examples

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgate/idemgate/examples/partnersim"
	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/workers"
	"github.com/idemgate/idemgate/workers/fence"
)

type stockRow struct {
	Initial, Stock, Ledger, Rows int64
}

// stockOf reads a tenant's SKU; a SKU the tenant does not have reads as
// zeros.
func stockOf(t *testing.T, pool *pgxpool.Pool, tenant, sku string) stockRow {
	t.Helper()
	var s stockRow
	err := pool.QueryRow(t.Context(), `
SELECT coalesce(max(i.initial_stock), 0)::bigint, coalesce(max(i.stock), 0)::bigint,
       (SELECT coalesce(sum(delta), 0)::bigint FROM inventory_ledger WHERE tenant = $1 AND sku = $2),
       (SELECT count(*) FROM inventory_ledger WHERE tenant = $1 AND sku = $2)
  FROM inventory_items i WHERE i.tenant = $1 AND i.sku = $2`, tenant, sku).Scan(&s.Initial, &s.Stock, &s.Ledger, &s.Rows)
	if err != nil {
		t.Fatalf("stock of %s: %v", workers.Scope(tenant, sku), err)
	}
	return s
}

// Many adjustments of two SKUs, each delivered twice at once, from many
// goroutines: every adjustment applies once, and the stock is the initial
// stock plus the sum of the deltas.
func TestInventoryBatch(t *testing.T) {
	t.Parallel()
	e := newBizEnv(t, partnersim.Options{}, nil)
	initial := map[string]int64{"A": 1000, "B": 200} // enough for any order of the deltas
	for sku, n := range initial {
		if err := SeedInventory(t.Context(), e.pool, "acme", sku, n); err != nil {
			t.Fatal(err)
		}
	}
	const adjustments = 24
	r := rand.New(rand.NewPCG(7, 7))
	want := map[string]int64{"A": initial["A"], "B": initial["B"]}
	var adjs []InventoryAdjust
	for i := range adjustments {
		sku := []string{"A", "B"}[i%2]
		delta := r.Int64N(20) - 8 // some negative
		if delta == 0 {
			delta = 3
		}
		want[sku] += delta
		adjs = append(adjs, InventoryAdjust{AdjustmentID: fmt.Sprintf("adj-%d", i), SKU: sku, Delta: delta})
	}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for _, a := range adjs {
		tk := task(t, "acme", TaskInventoryAdjust, a)
		for range 2 {
			wg.Go(func() {
				<-start
				deliverUntilDone(t, e.mux, tk)
			})
		}
	}
	close(start)
	wg.Wait()

	for sku, stock := range want {
		got := stockOf(t, e.pool, "acme", sku)
		if got.Stock != stock || got.Stock != got.Initial+got.Ledger || got.Rows != adjustments/2 {
			t.Errorf("SKU %s: %+v; want stock %d = initial %d + ledger, %d ledger rows", sku, got, stock, initial[sku], adjustments/2)
		}
	}
	for _, a := range adjs {
		if rec := e.exec(t, "acme", "inventory:"+a.AdjustmentID); rec.Status != "succeeded" || rec.ResultRef != a.AdjustmentID {
			t.Errorf("execution of %s = %+v", a.AdjustmentID, rec)
		}
	}
}

func TestInventoryStaleTokenIsRefused(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t, tables())
	s := inventory{db: pool}
	if err := SeedInventory(t.Context(), pool, "acme", "C", 10); err != nil {
		t.Fatal(err)
	}
	old := directJob(t, pool, "acme", TaskInventoryAdjust, InventoryAdjust{AdjustmentID: "adj-old", SKU: "C", Delta: 100})
	newer := directJob(t, pool, "acme", TaskInventoryAdjust, InventoryAdjust{AdjustmentID: "adj-new", SKU: "C", Delta: 1})
	if _, err := s.adjust(t.Context(), newer); err != nil {
		t.Fatal(err)
	}
	_, err := s.adjust(t.Context(), old)
	var stale *fence.StaleTokenError
	if !errors.As(err, &stale) || stale.Token != old.Token || stale.Latest != newer.Token {
		t.Fatalf("write with the old token: %v, want a *fence.StaleTokenError naming tokens %d and %d", err, old.Token, newer.Token)
	}
	if got := stockOf(t, pool, "acme", "C"); got.Stock != 11 || got.Rows != 1 {
		t.Fatalf("after the refused write: %+v, want stock 11 and only the newer ledger row", got)
	}
	// The old owner's job runs again under a new token: now it applies.
	if _, err := s.adjust(t.Context(), directJob(t, pool, "acme", TaskInventoryAdjust, old.Payload)); err != nil {
		t.Fatalf("rerun of the refused adjustment: %v", err)
	}
	if got := stockOf(t, pool, "acme", "C"); got.Stock != 111 || got.Rows != 2 {
		t.Fatalf("after the rerun: %+v, want stock 111", got)
	}
}

func TestInventoryAdjustments(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t, tables())
	s := inventory{db: pool}
	if err := SeedInventory(t.Context(), pool, "acme", "D", 5); err != nil {
		t.Fatal(err)
	}
	// Steps run in order against one schema.
	steps := []struct {
		name      string
		tenant    string
		adj       InventoryAdjust
		permanent error // nil: must succeed
		wantStock int64
	}{
		{name: "take some", tenant: "acme", adj: InventoryAdjust{AdjustmentID: "a1", SKU: "D", Delta: -3}, wantStock: 2},
		{name: "replay leaves the stock alone", tenant: "acme", adj: InventoryAdjust{AdjustmentID: "a1", SKU: "D", Delta: -3}, wantStock: 2},
		{name: "more than there is", tenant: "acme", adj: InventoryAdjust{AdjustmentID: "a2", SKU: "D", Delta: -3}, permanent: ErrInsufficientStock, wantStock: 2},
		{name: "same id, other delta", tenant: "acme", adj: InventoryAdjust{AdjustmentID: "a1", SKU: "D", Delta: -1}, permanent: ErrAdjustmentConflict, wantStock: 2},
		{name: "unknown SKU starts at zero", tenant: "acme", adj: InventoryAdjust{AdjustmentID: "a3", SKU: "E", Delta: 4}, wantStock: 4},
		{name: "another tenant's SKU D is not acme's", tenant: "globex", adj: InventoryAdjust{AdjustmentID: "a1", SKU: "D", Delta: -1}, permanent: ErrInsufficientStock},
		{name: "another tenant's adjustment a1 is its own", tenant: "globex", adj: InventoryAdjust{AdjustmentID: "a1", SKU: "D", Delta: 6}, wantStock: 6},
	}
	for _, st := range steps {
		ok := t.Run(st.name, func(t *testing.T) {
			ref, err := s.adjust(t.Context(), directJob(t, pool, st.tenant, TaskInventoryAdjust, st.adj))
			switch {
			case st.permanent == nil && (err != nil || ref != st.adj.AdjustmentID):
				t.Fatalf("adjust = %q, %v; want %q", ref, err, st.adj.AdjustmentID)
			case st.permanent != nil && (!errors.Is(err, st.permanent) || !workers.IsPermanent(err)):
				t.Fatalf("adjust = %v, want permanent %v", err, st.permanent)
			}
			if got := stockOf(t, pool, st.tenant, st.adj.SKU); got.Stock != st.wantStock || got.Stock != got.Initial+got.Ledger {
				t.Fatalf("SKU %s of %s: %+v, want stock %d = initial + ledger", st.adj.SKU, st.tenant, got, st.wantStock)
			}
		})
		if !ok {
			break
		}
	}
	if got := stockOf(t, pool, "acme", "D"); got.Stock != 2 {
		t.Fatalf("acme's SKU D after globex's adjustments: %+v, want 2", got)
	}
	// Taking from an unknown SKU fails and does not create it.
	_, err := s.adjust(t.Context(), directJob(t, pool, "acme", TaskInventoryAdjust, InventoryAdjust{AdjustmentID: "a5", SKU: "F", Delta: -1}))
	if !errors.Is(err, ErrInsufficientStock) {
		t.Fatalf("taking from an unknown SKU: %v", err)
	}
	if skus := strings1(t, pool, `SELECT sku FROM inventory_items WHERE sku = 'F'`); len(skus) != 0 {
		t.Fatal("a refused adjustment created its SKU")
	}
	// Seeding after adjustments keeps stock = initial + ledger.
	if err := SeedInventory(t.Context(), pool, "acme", "E", 10); err != nil {
		t.Fatal(err)
	}
	if got := stockOf(t, pool, "acme", "E"); got.Initial != 10 || got.Stock != 14 {
		t.Fatalf("SKU E after seeding: %+v, want initial 10, stock 14", got)
	}
	if err := SeedInventory(t.Context(), pool, "acme", "E", -1); err == nil {
		t.Fatal("SeedInventory accepted a negative stock")
	}
}
