package job

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Weights returns pool's effective weights: those set at run time
// (SetWeights) if any, else the configured ones.
func (f *Fairness) Weights(ctx context.Context, pool string) (FairPool, FairWeights, bool, error) {
	p, ok := f.pools[pool]
	if !ok {
		return FairPool{}, FairWeights{}, false, nil
	}
	w := FairWeights{Default: p.DefaultWeight, Weights: maps.Clone(p.Weights)}
	if w.Weights == nil {
		w.Weights = map[string]float64{}
	}
	set, err := f.rdb.HGetAll(ctx, f.keys(p, 0)[3]).Result()
	if err != nil {
		return p.FairPool, w, true, fmt.Errorf("job: fairness pool %s: weights: %w", pool, err)
	}
	if len(set) > 0 {
		w = FairWeights{Weights: map[string]float64{}}
		for k, v := range set {
			x, _ := strconv.ParseFloat(v, 64)
			if t, ok := strings.CutPrefix(k, "t:"); ok {
				w.Weights[t] = x
			} else if k == "default" {
				w.Default = x
			}
		}
	}
	return p.FairPool, w, true, nil
}

// ErrNoPool: no fairness pool has the name.
var ErrNoPool = errors.New("job: no such fairness pool")

// SetWeights replaces pool's weights, for the jobs that enter it from now
// on, until they are set again. w must pass Check.
func (f *Fairness) SetWeights(ctx context.Context, pool string, w FairWeights) error {
	p, ok := f.pools[pool]
	if !ok {
		return fmt.Errorf("%w: %q", ErrNoPool, pool)
	}
	if err := w.Check(); err != nil {
		return err
	}
	vals := []any{"default", strconv.FormatFloat(w.Default, 'g', -1, 64)}
	for t, x := range w.Weights {
		vals = append(vals, "t:"+t, strconv.FormatFloat(x, 'g', -1, 64))
	}
	// Each shard keeps a copy in its own slot, where its scripts read it.
	for shard := range f.shards() {
		key := f.keys(p, shard)[3]
		_, err := f.rdb.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
			pipe.Del(ctx, key)
			pipe.HSet(ctx, key, vals...)
			return nil
		})
		if err != nil {
			return fmt.Errorf("job: fairness pool %s: set weights: %w", pool, err)
		}
	}
	return nil
}

// FairBacklog is a tenant's jobs in a pool now.
type FairBacklog struct {
	Tenant string
	// Ready wait for their turn, Delayed for a due time, and InFlight
	// are in asynq.
	Ready, Delayed, InFlight int
}

// Backlog reads pool's jobs by tenant, and how many are in flight. It
// reads every entry: meant for an operator's look, not a hot path.
func (f *Fairness) Backlog(ctx context.Context, pool string) ([]FairBacklog, int, error) {
	p, ok := f.pools[pool]
	if !ok {
		return nil, 0, fmt.Errorf("%w: %q", ErrNoPool, pool)
	}
	by := map[string]*FairBacklog{}
	total := 0
	for shard := range f.shards() {
		n, err := f.backlog(ctx, f.keys(p, shard), by)
		if err != nil {
			return nil, 0, fmt.Errorf("job: fairness pool %s: backlog: %w", pool, err)
		}
		total += n
	}
	out := make([]FairBacklog, 0, len(by))
	for _, t := range slices.Sorted(maps.Keys(by)) {
		out = append(out, *by[t])
	}
	return out, total, nil
}

// backlog counts one shard's jobs into by and returns its jobs in flight.
func (f *Fairness) backlog(ctx context.Context, keys []string, by map[string]*FairBacklog) (int, error) {
	flying, err := f.rdb.ZRange(ctx, keys[5], 0, -1).Result()
	if err != nil {
		return 0, err
	}
	inFlight := map[string]bool{}
	for _, id := range flying {
		inFlight[id] = true
	}
	var cursor uint64
	for {
		kv, next, err := f.rdb.HScan(ctx, keys[0], cursor, "", 1000).Result()
		if err != nil {
			return 0, err
		}
		for i := 0; i+1 < len(kv); i += 2 {
			var e struct {
				Tenant string `json:"t"`
				Member string `json:"m"`
			}
			if json.Unmarshal([]byte(kv[i+1]), &e) != nil {
				continue
			}
			b := by[e.Tenant]
			if b == nil {
				b = &FairBacklog{Tenant: e.Tenant}
				by[e.Tenant] = b
			}
			switch {
			case e.Member != "":
				b.Ready++
			case inFlight[kv[i]]:
				b.InFlight++
			default:
				b.Delayed++
			}
		}
		if cursor = next; cursor == 0 {
			break
		}
	}
	return len(flying), nil
}
