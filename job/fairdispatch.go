package job

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// fairEntry is a job's entry in its pool (fairscript.go).
type fairEntry struct {
	Tenant    string  `json:"t"`
	Tier      float64 `json:"p"`
	Submitted float64 `json:"s"`
	Failures  float64 `json:"n"`
	Reentries float64 `json:"r"`
}

// fairPopMax bounds the delayed jobs one dispatch files.
const fairPopMax = 1000

// fairSendParallel bounds the enqueues one dispatch has in flight.
const fairSendParallel = 16

// dispatch moves what the window allows of p into flight and enqueues the
// tasks; it returns how many it moved.
func (f *Fairness) dispatch(ctx context.Context, sub *Submitter, p *fairPool, shard int) (int, error) {
	out, err := fairDispatch.Run(ctx, f.rdb, f.keys(p, shard), f.dispatchArgs(p)...).StringSlice()
	if err != nil {
		return 0, fmt.Errorf("job: fairness pool %s: dispatch: %w", p.Name, err)
	}
	if len(out) == 0 {
		return 0, nil
	}
	ids := make([]string, 0, len(out)/2)
	entries := map[string]fairEntry{}
	for i := 0; i+1 < len(out); i += 2 {
		var e fairEntry
		_ = json.Unmarshal([]byte(out[i+1]), &e)
		ids = append(ids, out[i])
		entries[out[i]] = e
	}
	records, err := f.entryRecords(ctx, sub, ids)
	if err != nil {
		// They stay in flight: the reconcile pass enqueues them.
		return len(ids), fmt.Errorf("job: fairness pool %s: dispatch: %w", p.Name, err)
	}
	// The enqueues go out together: each is a round trip to Redis, and
	// one after the other they would bound the pool's throughput.
	errs := make([]error, len(ids))
	sent := make([]string, len(ids)) // the tenant of each job sent
	sem := make(chan struct{}, fairSendParallel)
	var wg sync.WaitGroup
	for i, id := range ids {
		r, ok := records[id]
		if !ok {
			errs[i] = f.drop(ctx, p, shard, id)
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if _, err := sub.sendAs(ctx, r, id, fairHeaders(p, entries[id])); err != nil {
				errs[i] = err
				return
			}
			sent[i] = r.Tenant
		})
	}
	wg.Wait()
	for i := range ids {
		if errs[i] == nil && sent[i] != "" && f.Observer != nil {
			f.Observer.Dispatched(p.Name, sent[i]) // in the pool's order
		}
	}
	if err := errors.Join(errs...); err != nil {
		return len(ids), fmt.Errorf("job: fairness pool %s: dispatch: %w", p.Name, err)
	}
	return len(ids), nil
}

// dispatchArgs are fairDispatch's arguments for p.
func (f *Fairness) dispatchArgs(p *fairPool) []any {
	return f.args(p, p.Window, fairPopMax, int(fairMeasuredFor.Seconds()), fairDwellArg)
}

func fairHeaders(p *fairPool, e fairEntry) map[string]string {
	return map[string]string{
		HeaderFairPool:      p.Name,
		HeaderFairSubmitted: strconv.FormatInt(int64(e.Submitted), 10),
		HeaderFairFailures:  strconv.Itoa(int(e.Failures)),
		HeaderFairReentries: strconv.Itoa(int(e.Reentries)),
	}
}

// entryRecords reads the jobs of a pool's entries, by entry id. An entry
// whose job is gone or finished, or that a later version of its
// debounced job superseded, is left out: it has nothing to run.
func (f *Fairness) entryRecords(ctx context.Context, sub *Submitter, ids []string) (map[string]Row, error) {
	jobs := make([]string, len(ids))
	for i, id := range ids {
		jobs[i] = taskJobID(id)
	}
	records, err := sub.records.byIDs(ctx, jobs)
	if err != nil {
		return nil, err
	}
	out := make(map[string]Row, len(ids))
	for _, id := range ids {
		if r, ok := records[taskJobID(id)]; ok && !r.Status.Final() && TaskID(r) == id {
			out[id] = r
		}
	}
	return out, nil
}

// drop takes the entry id out of p.
func (f *Fairness) drop(ctx context.Context, p *fairPool, shard int, id string) error {
	if err := fairDone.Run(ctx, f.rdb, f.keys(p, shard), f.args(p, id)...).Err(); err != nil {
		return fmt.Errorf("job: fairness pool %s: drop %s: %w", p.Name, id, err)
	}
	return nil
}

// Run runs a dispatcher for every pool until ctx ends, enqueueing with
// sub and reconciling the jobs in flight with inspector, and returns nil
// then. A failed dispatch or reconcile pass is logged and tried again.
func (f *Fairness) Run(ctx context.Context, sub *Submitter, inspector TaskInspector) error {
	var wg sync.WaitGroup
	for _, p := range f.pools {
		for shard := range f.shards() {
			wg.Go(func() { f.runPool(ctx, sub, inspector, p, shard) })
		}
	}
	wg.Wait()
	return nil
}

func (f *Fairness) runPool(ctx context.Context, sub *Submitter, inspector TaskInspector, p *fairPool, shard int) {
	poll := f.Poll
	if poll <= 0 {
		poll = 100 * time.Millisecond
	}
	after := f.ReconcileAfter
	if after <= 0 {
		after = 10 * time.Second
	}
	tick := time.NewTicker(poll)
	defer tick.Stop()
	reconcile := time.NewTicker(max(after/2, poll))
	defer reconcile.Stop()
	failing := false
	for {
		woken := p.woken()
		n, err := f.dispatch(ctx, sub, p, shard)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil && !failing:
			f.logger().WarnContext(ctx, "fairness: dispatch failed; the next one tries again", "pool", p.Name, "err", err)
		}
		failing = err != nil
		if n > 0 && err == nil {
			continue // the window may have room for more
		}
		select {
		case <-ctx.Done():
			return
		case <-woken:
		case <-tick.C:
		case <-reconcile.C:
			if _, err := f.reconcile(ctx, sub, inspector, p, shard, after); err != nil && ctx.Err() == nil {
				f.logger().WarnContext(ctx, "fairness: reconcile failed; the next pass tries again", "pool", p.Name, "err", err)
			}
		}
	}
}

// Reconcile checks pool's jobs in flight for longer than after: one whose
// task asynq does not hold is enqueued again while its job is
// unfinished. One whose job is finished, or a debounced job's version a
// later submit superseded, is dropped from the pool. It returns the
// TaskIDs it enqueued again.
func (f *Fairness) Reconcile(ctx context.Context, sub *Submitter, inspector TaskInspector, pool string, after time.Duration) ([]string, error) {
	p, ok := f.pools[pool]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrNoPool, pool)
	}
	var sent []string
	for shard := range f.shards() {
		s, err := f.reconcile(ctx, sub, inspector, p, shard, after)
		sent = append(sent, s...)
		if err != nil {
			return sent, err
		}
	}
	return sent, nil
}

// reconcile is Reconcile for one shard of p.
func (f *Fairness) reconcile(ctx context.Context, sub *Submitter, inspector TaskInspector, p *fairPool, shard int, after time.Duration) ([]string, error) {
	keys := f.keys(p, shard)
	ids, err := f.rdb.ZRangeByScore(ctx, keys[5], &redis.ZRangeBy{
		Min: "-inf", Max: strconv.FormatInt(f.now().Add(-after).UnixMilli(), 10), Count: DefaultRelayBatch,
	}).Result()
	if err != nil || len(ids) == 0 {
		return nil, err
	}
	records, err := f.entryRecords(ctx, sub, ids)
	if err != nil {
		return nil, fmt.Errorf("job: fairness pool %s: reconcile: %w", p.Name, err)
	}
	var sent []string
	for _, id := range ids {
		r, ok := records[id]
		if !ok {
			if err := f.drop(ctx, p, shard, id); err != nil {
				return sent, err
			}
			continue
		}
		state, err := TaskState(inspector, r.Queue, id)
		if err != nil {
			return sent, err
		}
		if state != "" {
			continue
		}
		raw, err := f.rdb.HGet(ctx, keys[0], id).Result()
		if errors.Is(err, redis.Nil) {
			continue // finished meanwhile
		} else if err != nil {
			return sent, fmt.Errorf("job: fairness pool %s: reconcile: %w", p.Name, err)
		}
		var e fairEntry
		_ = json.Unmarshal([]byte(raw), &e)
		if ok, err := sub.sendAs(ctx, r, id, fairHeaders(p, e)); err != nil {
			return sent, err
		} else if ok {
			sent = append(sent, id)
			f.logger().InfoContext(ctx, "fairness: task of a job in flight re-enqueued", "pool", p.Name, "job_id", r.ID, "task_id", id, "tenant", r.Tenant)
		}
	}
	return sent, nil
}
