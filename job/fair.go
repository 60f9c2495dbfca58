package job

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// Fairness between tenants. A pool orders its jobs in Redis by start-time fair
// queuing and moves at most Window of them into flight at once. PostgreSQL
// stays the truth. Losing the pool's keys resets the fairness history, never a
// job. Every key of a pool shares the hash tag {fair:<pool>}.
// Design: docs/design/fairness.md

// FairPool is one declared fairness pool.
type FairPool struct {
	// Name is how jobs name it (Spec.Fairness) and how the admin API and
	// the metrics label it.
	Name string
	// DefaultWeight is the weight of a tenant Weights does not name.
	// Default 1.
	DefaultWeight float64
	// Weights are the tenants' weights: a tenant of weight 3 gets three
	// times the dispatches of a tenant of weight 1 while both have jobs
	// waiting.
	Weights map[string]float64
	// Window is the most jobs of the pool handed to asynq at once.
	// Default DefaultFairWindow, 64.
	Window int
}

// DefaultFairWindow is FairPool.Window's default.
const DefaultFairWindow = 64

// FairWeights are a pool's effective weights.
type FairWeights struct {
	Default float64            `json:"default_weight"`
	Weights map[string]float64 `json:"weights"`
}

// Weight is tenant's weight.
func (w FairWeights) Weight(tenant string) float64 {
	if v, ok := w.Weights[tenant]; ok {
		return v
	}
	return w.Default
}

// Check says what is wrong with w: every weight must be positive and
// finite.
func (w FairWeights) Check() error {
	var errs []error
	if !validWeight(w.Default) {
		errs = append(errs, fmt.Errorf("default_weight must be a positive finite number, not %v", w.Default))
	}
	for _, t := range slices.Sorted(maps.Keys(w.Weights)) {
		if !validWeight(w.Weights[t]) {
			errs = append(errs, fmt.Errorf("weights[%q] must be a positive finite number, not %v", t, w.Weights[t]))
		}
	}
	return errors.Join(errs...)
}

func validWeight(w float64) bool { return w > 0 && !math.IsInf(w, 0) && !math.IsNaN(w) }

// Task headers of a pooled job's task: its pool, when it entered the pool
// (unix ms), its failures so far and how many times it entered again.
const (
	HeaderFairPool      = "fair_pool"
	HeaderFairSubmitted = "fair_submitted"
	HeaderFairFailures  = "fair_failures"
	HeaderFairReentries = "fair_reentries"
)

// FairObserver counts what the pools do. telemetry's FairMetrics is one.
type FairObserver interface {
	// Dispatched counts a job of tenant handed to asynq.
	Dispatched(pool, tenant string)
	// Dwelt reports how long a job waited from its submit to its start
	// (its first start only).
	Dwelt(pool, tenant string, d time.Duration)
}

// Fairness holds the declared pools and which job goes to which.
type Fairness struct {
	rdb   redis.UniversalClient
	pools map[string]*fairPool
	// uses: task → its pool and tier.
	uses map[string]fairUse
	// Prefix starts every key of the pools. Default DefaultFairPrefix.
	Prefix string
	// Shards is broker.shards: with more than one, each pool is kept per
	// shard (a tenant's jobs in its shard's, job.ShardQueue), with a
	// window of its own and its keys in a hash slot of its own. Default
	// 1. Set it before the first use.
	Shards int
	// Observer counts dispatches and dwell times; nil counts nothing.
	Observer FairObserver
	// Logger gets a line for each dispatch or reconcile pass that failed.
	// Default slog.Default().
	Logger *slog.Logger
	// Now is the clock due times are read on. Default time.Now.
	Now func() time.Time
	// Poll is how often a dispatcher looks at its pool when nothing woke
	// it. Default 100ms.
	Poll time.Duration
	// ReconcileAfter: a job in flight this long whose task asynq does not
	// hold is re-enqueued (or dropped, once finished). Default 10s.
	ReconcileAfter time.Duration
}

type fairPool struct {
	FairPool
	tiers []int // highest first
	mu    sync.Mutex
	wake  chan struct{} // closed to wake every dispatcher of the pool
}

// woken returns the channel the pool's next Wake closes.
func (p *fairPool) woken() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.wake
}

type fairUse struct {
	pool *fairPool
	tier int
}

// DefaultFairPrefix is the key prefix of the pools.
const DefaultFairPrefix = "idemgate:"

// NewFairness returns the pools on rdb, with the specs that name one. A
// spec naming an undeclared pool is an error (config checks it first).
func NewFairness(rdb redis.UniversalClient, pools []FairPool, specs []*Spec) (*Fairness, error) {
	f := &Fairness{rdb: rdb, pools: map[string]*fairPool{}, uses: map[string]fairUse{}}
	for _, p := range pools {
		if p.DefaultWeight == 0 {
			p.DefaultWeight = 1
		}
		if p.Window <= 0 {
			p.Window = DefaultFairWindow
		}
		f.pools[p.Name] = &fairPool{FairPool: p, wake: make(chan struct{})}
	}
	for _, s := range specs {
		if s.Fairness == "" {
			continue
		}
		p, ok := f.pools[s.Fairness]
		if !ok {
			return nil, fmt.Errorf("job: %s: no fairness pool called %q", s.Task, s.Fairness)
		}
		f.uses[s.Task] = fairUse{pool: p, tier: s.Priority}
		if !slices.Contains(p.tiers, s.Priority) {
			p.tiers = append(p.tiers, s.Priority)
		}
	}
	for _, p := range f.pools {
		if len(p.tiers) == 0 {
			p.tiers = []int{0}
		}
		slices.SortFunc(p.tiers, func(a, b int) int { return b - a })
	}
	return f, nil
}

// Pools lists the declared pools' names, sorted.
func (f *Fairness) Pools() []string { return slices.Sorted(maps.Keys(f.pools)) }

// pooled returns the pool and tier of task's jobs; ok false for a job in
// no pool (a nil Fairness has none).
func (f *Fairness) pooled(task string) (fairUse, bool) {
	if f == nil {
		return fairUse{}, false
	}
	u, ok := f.uses[task]
	return u, ok
}

func (f *Fairness) now() time.Time {
	if f.Now != nil {
		return f.Now()
	}
	return time.Now()
}

func (f *Fairness) logger() *slog.Logger {
	if f.Logger != nil {
		return f.Logger
	}
	return slog.Default()
}

// shards is Shards, at least 1.
func (f *Fairness) shards() int { return max(f.Shards, 1) }

// shardOf is tenant's shard of a pool.
func (f *Fairness) shardOf(tenant string) int { return shardIndex(tenant, f.shards()) }

// keys are the keys of shard of p, in the scripts' order
// (fairscript.go); the measured hash is the current minute's.
func (f *Fairness) keys(p *fairPool, shard int) []string {
	prefix := f.Prefix
	if prefix == "" {
		prefix = DefaultFairPrefix
	}
	tag := "fair:" + p.Name
	if f.shards() > 1 {
		tag += ":" + strconv.Itoa(shard)
	}
	base := prefix + "fair:{" + tag + "}:"
	keys := []string{base + "jobs", base + "state", base + "finish", base + "weights", base + "delayed", base + "inflight",
		measuredKey(base, f.now().Unix()/60)}
	for _, t := range p.tiers {
		keys = append(keys, base+"ready:"+strconv.Itoa(t))
	}
	return keys
}

// args are the scripts' first arguments, then more.
func (f *Fairness) args(p *fairPool, more ...any) []any {
	w := map[string]any{"d": p.DefaultWeight, "w": p.Weights}
	if p.Weights == nil {
		w["w"] = map[string]float64{}
	}
	cfg, _ := json.Marshal(w)
	tiers := make([]string, len(p.tiers))
	for i, t := range p.tiers {
		tiers[i] = strconv.Itoa(t)
	}
	return append([]any{string(cfg), strings.Join(tiers, ","), f.now().UnixMilli()}, more...)
}

// add files r in its pool unless the pool holds it, and reports whether
// it did. A job with a not_before waits in the delayed set until then.
// The entry's id is r's TaskID: each version of a debounced job is an
// entry of its own.
func (f *Fairness) add(ctx context.Context, u fairUse, r Row) (bool, error) {
	due := int64(0)
	if r.NotBefore != nil {
		due = ProcessAt(*r.NotBefore).UnixMilli()
	}
	submitted := r.CreatedAt
	if submitted.IsZero() {
		submitted = f.now()
	}
	id := TaskID(r)
	n, err := fairAdd.Run(ctx, f.rdb, f.keys(u.pool, f.shardOf(r.Tenant)), f.args(u.pool, id, r.Tenant, u.tier, submitted.UnixMilli(), due)...).Int()
	if err != nil {
		return false, fmt.Errorf("job: fairness pool %s: add %s: %w", u.pool.Name, id, err)
	}
	f.Wake(u.pool.Name)
	return n == 1, nil
}

// remove takes the entry id of tenant out of p, wherever it waits.
func (f *Fairness) remove(ctx context.Context, p *fairPool, tenant, id string) error {
	return f.drop(ctx, p, f.shardOf(tenant), id)
}

// taskEntry is the id of a task's entry in its pool: the task's TaskID,
// read from its headers.
func taskEntry(task *asynq.Task) string {
	n, _ := strconv.Atoi(task.Headers()[HeaderDebounce])
	return versionID(task.Headers()[HeaderID], n)
}

// Wake makes pool's dispatchers in this process look at it now.
func (f *Fairness) Wake(pool string) {
	if p, ok := f.pools[pool]; ok {
		p.mu.Lock()
		close(p.wake)
		p.wake = make(chan struct{})
		p.mu.Unlock()
	}
}

// taskPool is the pool a task's headers name, or nil.
func (f *Fairness) taskPool(task *asynq.Task) *fairPool {
	if f == nil {
		return nil
	}
	return f.pools[task.Headers()[HeaderFairPool]]
}

// Pooled reports whether task is the task of a pooled job, dispatched
// from its pool: its worker ends it there with Done or Back.
func (f *Fairness) Pooled(task *asynq.Task) bool { return f.taskPool(task) != nil }

// Started observes the dwell time of a pooled job's task starting: from
// its submit to now, on its first start only.
func (f *Fairness) Started(task *asynq.Task) {
	p := f.taskPool(task)
	if p == nil || f.Observer == nil || task.Headers()[HeaderFairReentries] != "0" {
		return
	}
	ms, err := strconv.ParseInt(task.Headers()[HeaderFairSubmitted], 10, 64)
	if err != nil {
		return
	}
	f.Observer.Dwelt(p.Name, task.Headers()[HeaderTenant], f.now().Sub(time.UnixMilli(ms)))
}

// Failures is how many attempts of a pooled job's task failed before
// this delivery: what asynq's retry count is to a task asynq retries.
func Failures(task *asynq.Task) int {
	n, _ := strconv.Atoi(task.Headers()[HeaderFairFailures])
	return n
}

// Done takes a pooled job's task, finished (succeeded, failed for good,
// cancelled), out of its pool, freeing its place in the window.
func (f *Fairness) Done(ctx context.Context, task *asynq.Task) error {
	p := f.taskPool(task)
	if p == nil {
		return nil
	}
	id := taskEntry(task)
	if err := fairDone.Run(ctx, f.rdb, f.keys(p, f.shardOf(task.Headers()[HeaderTenant])), f.args(p, id)...).Err(); err != nil {
		return fmt.Errorf("job: fairness pool %s: done %s: %w", p.Name, id, err)
	}
	f.Wake(p.Name)
	return nil
}

// Back files a pooled job's task again, due at due, to be tagged at its
// tenant's position then; failed counts the attempt as a failure. The
// worker acks the task once it returns nil; on an error it lets asynq
// retry the task instead, so the job is not lost.
func (f *Fairness) Back(ctx context.Context, task *asynq.Task, due time.Time, failed bool) error {
	p := f.taskPool(task)
	if p == nil {
		return errors.New("job: fairness: the task names no pool")
	}
	id, tenant := taskEntry(task), task.Headers()[HeaderTenant]
	tier := 0
	if u, ok := f.uses[task.Type()]; ok {
		tier = u.tier
	}
	fail := 0
	if failed {
		fail = 1
	}
	submitted := task.Headers()[HeaderFairSubmitted]
	if err := fairBack.Run(ctx, f.rdb, f.keys(p, f.shardOf(tenant)), f.args(p, id, due.UnixMilli(), fail, tenant, tier, submitted)...).Err(); err != nil {
		return fmt.Errorf("job: fairness pool %s: back %s: %w", p.Name, id, err)
	}
	f.Wake(p.Name)
	return nil
}
