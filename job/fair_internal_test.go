package job

import (
	"context"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/testkit"
)

// A superseded version of a debounced job that stays in its pool (a
// submit that filed it lost the race with the next, or could not take it
// out) is dropped by the dispatch and the reconcile pass that meet it,
// without a task: only the latest version's entry remains.
func TestFairDropsSupersededVersion(t *testing.T) {
	ctx := t.Context()
	pool := testkit.Pool(t)
	client, inspector, queue := testkit.Queue(t, "fair")
	rdb := testkit.Redis(t)
	spec, err := NewSpec("fair.debounced", []byte(`{"type":"object","required":["order_id"],"properties":{"order_id":{"type":"string"}}}`),
		"effect:{order_id}", "order:{order_id}")
	if err != nil {
		t.Fatal(err)
	}
	per, err := ParseTemplate("{tenant}:{order_id}")
	if err != nil {
		t.Fatal(err)
	}
	spec.Queue, spec.Fairness = queue, "tenants"
	spec.Debounce = &Debounce{Key: per, Delay: time.Minute, MaxDelay: time.Hour}
	f, err := NewFairness(rdb, []FairPool{{Name: "tenants", Window: 4}}, []*Spec{spec})
	if err != nil {
		t.Fatal(err)
	}
	f.Prefix = testkit.Prefix()
	t.Cleanup(func() {
		if keys, _ := rdb.Keys(context.Background(), f.Prefix+"*").Result(); len(keys) > 0 {
			_ = rdb.Del(context.Background(), keys...).Err()
		}
	})
	sub := NewSubmitter(pool, client)
	sub.Fairness = f
	var r Row
	for i, key := range []string{"k-1", "k-2"} {
		if r, err = sub.Submit(ctx, Request{Tenant: "acme", Route: "fair", Key: key, Spec: spec,
			Body: []byte(`{"order_id":"o-1"}`)}); err != nil {
			t.Fatalf("submit %d: %v", i+1, err)
		}
	}
	if TaskID(r) != r.ID+":d2" {
		t.Fatalf("the job's task id %s; want version 2", TaskID(r))
	}
	u, _ := f.pooled(spec.Task)
	keys := f.keys(u.pool, 0)
	entries := func() []string {
		ids, err := rdb.HKeys(ctx, keys[0]).Result()
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	if got := entries(); len(got) != 1 || got[0] != TaskID(r) {
		t.Fatalf("the pool's entries %v; want version 2's alone", got)
	}

	// Version 1 filed again, due now, as a racing submit would.
	v1 := r
	v1.Debounce = &Debounced{Coalesced: 1}
	v1.NotBefore = nil
	refile := func() {
		t.Helper()
		if added, err := f.add(ctx, u, v1); err != nil || !added {
			t.Fatalf("filing version 1 again: %v %v", added, err)
		}
	}

	t.Run("dispatch", func(t *testing.T) {
		refile()
		if n, err := f.dispatch(ctx, sub, u.pool, 0); err != nil || n != 1 {
			t.Fatalf("dispatch: moved %d, %v; want version 1", n, err)
		}
		if _, err := inspector.GetTaskInfo(queue, r.ID); err == nil {
			t.Error("the dispatch sent version 1's task")
		}
		if got := entries(); len(got) != 1 || got[0] != TaskID(r) {
			t.Errorf("the pool's entries %v; want version 2's alone", got)
		}
	})

	t.Run("reconcile", func(t *testing.T) {
		// A dispatcher that died after moving version 1 into flight.
		refile()
		if err := fairDispatch.Run(ctx, rdb, keys, f.dispatchArgs(u.pool)...).Err(); err != nil {
			t.Fatal(err)
		}
		if n, _ := rdb.ZCard(ctx, keys[5]).Result(); n != 1 {
			t.Fatalf("%d in flight; want version 1", n)
		}
		sent, err := f.Reconcile(ctx, sub, inspector, "tenants", 0)
		if err != nil || len(sent) != 0 {
			t.Fatalf("reconcile sent %v, %v; want nothing", sent, err)
		}
		if n, _ := rdb.ZCard(ctx, keys[5]).Result(); n != 0 {
			t.Errorf("%d in flight after the reconcile pass; want 0", n)
		}
		if got := entries(); len(got) != 1 || got[0] != TaskID(r) {
			t.Errorf("the pool's entries %v; want version 2's alone", got)
		}
	})
}
