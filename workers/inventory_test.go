package workers

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgate/idemgate/enqueue"
	"github.com/idemgate/idemgate/internal/partnersim"
	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/idemgate/idemgate/workers/fence"
)

type stockRow struct {
	Initial, Stock, Ledger, Rows int64
}

func stockOf(t *testing.T, pool *pgxpool.Pool, sku string) stockRow {
	t.Helper()
	var s stockRow
	err := pool.QueryRow(t.Context(), `
SELECT i.initial_stock, i.stock,
       (SELECT coalesce(sum(delta), 0)::bigint FROM inventory_ledger WHERE sku = i.sku),
       (SELECT count(*) FROM inventory_ledger WHERE sku = i.sku)
  FROM inventory_items i WHERE i.sku = $1`, sku).Scan(&s.Initial, &s.Stock, &s.Ledger, &s.Rows)
	if err != nil {
		t.Fatalf("stock of %s: %v", sku, err)
	}
	return s
}

func inventoryJob(t *testing.T, pool *pgxpool.Pool, p enqueue.InventoryAdjust) Job[enqueue.InventoryAdjust] {
	t.Helper()
	token, err := fence.Next(t.Context(), pool, p.Resource())
	if err != nil {
		t.Fatal(err)
	}
	return Job[enqueue.InventoryAdjust]{Key: p.BusinessKey(), Resource: p.Resource(), Payload: p, Token: token, Attempt: 1}
}

// Many adjustments of two SKUs, each delivered twice at once, from many
// goroutines: every adjustment applies once, and the stock is the initial
// stock plus the sum of the deltas.
func TestInventoryBatch(t *testing.T) {
	t.Parallel()
	e := newBizEnv(t, partnersim.Options{}, nil)
	h := e.handler(enqueue.TaskInventoryAdjust)
	initial := map[string]int64{"A": 1000, "B": 200} // enough for any order of the deltas
	for sku, n := range initial {
		if err := SeedInventory(t.Context(), e.pool, sku, n); err != nil {
			t.Fatal(err)
		}
	}
	const adjustments = 24
	r := rand.New(rand.NewPCG(7, 7))
	want := map[string]int64{"A": initial["A"], "B": initial["B"]}
	var adjs []enqueue.InventoryAdjust
	for i := range adjustments {
		sku := []string{"A", "B"}[i%2]
		delta := r.Int64N(20) - 8 // some negative
		if delta == 0 {
			delta = 3
		}
		want[sku] += delta
		adjs = append(adjs, enqueue.InventoryAdjust{AdjustmentID: fmt.Sprintf("adj-%d", i), SKU: sku, Delta: delta})
	}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for _, a := range adjs {
		tk := task(t, enqueue.TaskInventoryAdjust, a)
		for range 2 {
			wg.Go(func() {
				<-start
				deliverUntilDone(t, h, tk)
			})
		}
	}
	close(start)
	wg.Wait()

	for sku, stock := range want {
		got := stockOf(t, e.pool, sku)
		if got.Stock != stock || got.Stock != got.Initial+got.Ledger || got.Rows != adjustments/2 {
			t.Errorf("SKU %s: %+v; want stock %d = initial %d + ledger, %d ledger rows", sku, got, stock, initial[sku], adjustments/2)
		}
	}
	for _, a := range adjs {
		if rec := execOf(t, e.pool, a.BusinessKey()); rec.Status != "succeeded" || rec.ResultRef != a.AdjustmentID {
			t.Errorf("execution of %s = %+v", a.AdjustmentID, rec)
		}
	}
}

func TestInventoryStaleTokenIsRefused(t *testing.T) {
	t.Parallel()
	pool := testenv.Pool(t)
	if err := SeedInventory(t.Context(), pool, "C", 10); err != nil {
		t.Fatal(err)
	}
	old := inventoryJob(t, pool, enqueue.InventoryAdjust{AdjustmentID: "adj-old", SKU: "C", Delta: 100})
	newer := inventoryJob(t, pool, enqueue.InventoryAdjust{AdjustmentID: "adj-new", SKU: "C", Delta: 1})
	if _, err := adjustInventory(t.Context(), pool, newer); err != nil {
		t.Fatal(err)
	}
	_, err := adjustInventory(t.Context(), pool, old)
	var stale *fence.StaleTokenError
	if !errors.As(err, &stale) || stale.Token != old.Token || stale.Latest != newer.Token {
		t.Fatalf("write with the old token: %v, want a *fence.StaleTokenError naming tokens %d and %d", err, old.Token, newer.Token)
	}
	if got := stockOf(t, pool, "C"); got.Stock != 11 || got.Rows != 1 {
		t.Fatalf("after the refused write: %+v, want stock 11 and only the newer ledger row", got)
	}
	// The old owner's job runs again under a new token: now it applies.
	if _, err := adjustInventory(t.Context(), pool, inventoryJob(t, pool, old.Payload)); err != nil {
		t.Fatalf("rerun of the refused adjustment: %v", err)
	}
	if got := stockOf(t, pool, "C"); got.Stock != 111 || got.Rows != 2 {
		t.Fatalf("after the rerun: %+v, want stock 111", got)
	}
}

func TestInventoryAdjustments(t *testing.T) {
	t.Parallel()
	pool := testenv.Pool(t)
	if err := SeedInventory(t.Context(), pool, "D", 5); err != nil {
		t.Fatal(err)
	}
	// Steps run in order against one schema.
	steps := []struct {
		name      string
		adj       enqueue.InventoryAdjust
		permanent error // nil: must succeed
		sku       string
		wantStock int64
	}{
		{name: "take some", adj: enqueue.InventoryAdjust{AdjustmentID: "a1", SKU: "D", Delta: -3}, sku: "D", wantStock: 2},
		{name: "replay leaves the stock alone", adj: enqueue.InventoryAdjust{AdjustmentID: "a1", SKU: "D", Delta: -3}, sku: "D", wantStock: 2},
		{name: "more than there is", adj: enqueue.InventoryAdjust{AdjustmentID: "a2", SKU: "D", Delta: -3}, permanent: ErrInsufficientStock, sku: "D", wantStock: 2},
		{name: "same id, other delta", adj: enqueue.InventoryAdjust{AdjustmentID: "a1", SKU: "D", Delta: -1}, permanent: ErrAdjustmentConflict, sku: "D", wantStock: 2},
		{name: "unknown SKU starts at zero", adj: enqueue.InventoryAdjust{AdjustmentID: "a3", SKU: "E", Delta: 4}, sku: "E", wantStock: 4},
		{name: "zero delta is invalid", adj: enqueue.InventoryAdjust{AdjustmentID: "a4", SKU: "E", Delta: 0}, permanent: enqueue.ErrInvalid, sku: "E", wantStock: 4},
	}
	for _, st := range steps {
		ok := t.Run(st.name, func(t *testing.T) {
			ref, err := adjustInventory(t.Context(), pool, inventoryJob(t, pool, st.adj))
			switch {
			case st.permanent == nil && (err != nil || ref != st.adj.AdjustmentID):
				t.Fatalf("adjustInventory = %q, %v; want %q", ref, err, st.adj.AdjustmentID)
			case st.permanent != nil && (!errors.Is(err, st.permanent) || !IsPermanent(err)):
				t.Fatalf("adjustInventory = %v, want permanent %v", err, st.permanent)
			}
			if got := stockOf(t, pool, st.sku); got.Stock != st.wantStock || got.Stock != got.Initial+got.Ledger {
				t.Fatalf("SKU %s: %+v, want stock %d = initial + ledger", st.sku, got, st.wantStock)
			}
		})
		if !ok {
			break
		}
	}
	// Taking from an unknown SKU fails and does not create it.
	_, err := adjustInventory(t.Context(), pool, inventoryJob(t, pool, enqueue.InventoryAdjust{AdjustmentID: "a5", SKU: "F", Delta: -1}))
	if !errors.Is(err, ErrInsufficientStock) {
		t.Fatalf("taking from an unknown SKU: %v", err)
	}
	if skus := strings1(t, pool, `SELECT sku FROM inventory_items WHERE sku = 'F'`); len(skus) != 0 {
		t.Fatal("a refused adjustment created its SKU")
	}
	// Seeding after adjustments keeps stock = initial + ledger.
	if err := SeedInventory(t.Context(), pool, "E", 10); err != nil {
		t.Fatal(err)
	}
	if got := stockOf(t, pool, "E"); got.Initial != 10 || got.Stock != 14 {
		t.Fatalf("SKU E after seeding: %+v, want initial 10, stock 14", got)
	}
	if err := SeedInventory(t.Context(), pool, "E", -1); err == nil {
		t.Fatal("SeedInventory accepted a negative stock")
	}
}
