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

// Fairness between tenants.
//
// The jobs of a declared pool (Spec.Fairness) do not go to asynq when
// they are submitted: they wait in the pool, in Redis, ordered by
// start-time fair queuing between tenants. A job's tag is assigned as it
// enters: S = max(V, F[tenant]), then F[tenant] = S + 1/weight(tenant),
// where V, the pool's clock, is the tag of the last job dispatched. A
// tenant that submits 10,000 jobs gets tags V, V+1, …; another that then
// submits 10 gets tags from V again, so its jobs interleave with the first
// one's instead of waiting behind them, and a tenant back from idling
// starts at V: idling banks no credit. Higher priority tiers
// (Spec.Priority) go first whatever their tags.
//
// A dispatcher (Fairness.Run, in every worker) moves at most Window of a
// pool's jobs at once into flight, atomically (a Lua script, so any
// number of dispatchers may run), and enqueues their tasks to asynq with
// the task builder Submit uses. A job leaves flight when its worker
// settles it: finished (Fairness.Done), or sent back with a due time
// (Fairness.Back: a retry's backoff, a flow limit's or a busy lock's
// wait), to get a new tag at its tenant's position once due. A job
// scheduled for later waits in the same delayed set.
//
// An entry's id is its job's TaskID. Each submit that changes a debounced
// job files its new version, due at its new not_before, and takes the
// superseded one out. A superseded version that stays (the submit could
// not take it out, or two submits raced) is dropped by the next dispatch
// or reconcile pass that meets it, and its task, if already sent, is
// refused by the take and leaves flight like any finished one.
//
// PostgreSQL stays the truth. The dispatcher's reconcile pass re-enqueues
// a job in flight whose task asynq does not hold (a dispatcher that died
// between the pop and the enqueue, a Redis that lost the task) while the
// job is unfinished and the entry its current version, and drops it
// otherwise; the relay files again an unfinished job it finds neither in
// the pool nor in asynq. Losing the pool's keys resets the fairness
// history, never a job.
//
// Every key of a pool shares the hash tag {fair:<pool>}, so a pool lives
// in one Redis Cluster slot.

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
// (fairscript.go).
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
	keys := []string{base + "jobs", base + "state", base + "finish", base + "weights", base + "delayed", base + "inflight"}
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
func (f *Fairness) add(ctx context.Context, u fairUse, r Record) (bool, error) {
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
// from its pool: its worker settles it with Done or Back.
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
	out, err := fairDispatch.Run(ctx, f.rdb, f.keys(p, shard), f.args(p, p.Window, fairPopMax)...).StringSlice()
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
func (f *Fairness) entryRecords(ctx context.Context, sub *Submitter, ids []string) (map[string]Record, error) {
	jobs := make([]string, len(ids))
	for i, id := range ids {
		jobs[i] = taskJobID(id)
	}
	records, err := sub.records.byIDs(ctx, jobs)
	if err != nil {
		return nil, err
	}
	out := make(map[string]Record, len(ids))
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
			continue // settled meanwhile
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
