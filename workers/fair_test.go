package workers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/job"
)

// fairEnv is a server env whose jobs of fairTask (priority 0),
// fairUrgent (priority 1) and fairDebounced (priority 0, folded per
// order for 2s, at most 1m) wait in one fairness pool.
type fairEnv struct {
	*serverEnv
	fair      *job.Fairness
	sub       *job.Submitter
	spec      *job.Spec
	urgent    *job.Spec
	debounced *job.Spec
	order     *fairOrder
	started   *fairOrder
}

const (
	fairTask      = "fair.work"
	fairUrgent    = "fair.urgent"
	fairDebounced = "fair.debounced"
)

// fairOrder records tenants (or job ids) in the order events happened.
type fairOrder struct {
	mu   sync.Mutex
	seq  []string
	jobs []string
}

func (o *fairOrder) add(tenant, id string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.seq = append(o.seq, tenant)
	o.jobs = append(o.jobs, id)
}

func (o *fairOrder) snapshot() (tenants, ids []string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.seq), slices.Clone(o.jobs)
}

func (o *fairOrder) len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.seq)
}

// Dispatched and Dwelt make fairOrder a job.FairObserver recording the
// dispatch order (the job ids come from the started order instead).
func (o *fairOrder) Dispatched(_, tenant string)         { o.add(tenant, "") }
func (o *fairOrder) Dwelt(string, string, time.Duration) {}

func newFairEnv(t testing.TB, pool job.FairPool) *fairEnv {
	t.Helper()
	s := newServerEnv(t)
	spec, err := job.NewSpec(fairTask, []byte(`{"type":"object","required":["order_id"],"properties":{"order_id":{"type":"string"}}}`), "effect:{order_id}", "order:{order_id}")
	if err != nil {
		t.Fatal(err)
	}
	spec.Queue, spec.Fairness = s.queue, pool.Name
	urgent := *spec
	urgent.Task, urgent.Priority = fairUrgent, 1
	debounced := *spec
	debounced.Task = fairDebounced
	per, err := job.ParseTemplate("{tenant}:{order_id}")
	if err != nil {
		t.Fatal(err)
	}
	debounced.Debounce = &job.Debounce{Key: per, Delay: 2 * time.Second, MaxDelay: time.Minute, Mode: job.DebounceTrailing}
	f, err := job.NewFairness(s.rdb, []job.FairPool{pool}, []*job.Spec{spec, &urgent, &debounced})
	if err != nil {
		t.Fatal(err)
	}
	f.Prefix = s.prefix
	f.Poll = 20 * time.Millisecond
	f.ReconcileAfter = time.Second
	f.Logger = testkit.Logger()
	e := &fairEnv{serverEnv: s, fair: f, spec: spec, urgent: &urgent, debounced: &debounced, order: &fairOrder{}, started: &fairOrder{}}
	f.Observer = e.order
	e.sub = job.NewSubmitter(s.pool, s.client)
	e.sub.Fairness = f
	t.Cleanup(func() {
		keys, _ := s.rdb.Keys(context.Background(), s.prefix+"fair:*").Result()
		if len(keys) > 0 {
			_ = s.rdb.Del(context.Background(), keys...).Err()
		}
	})
	return e
}

// submit submits n jobs of tenant, keyed prefix-0…, with spec.
func (e *fairEnv) submit(t testing.TB, spec *job.Spec, tenant, prefix string, n int) {
	t.Helper()
	const workers = 8
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				key := fmt.Sprintf("%s-%d", prefix, i)
				_, err := e.sub.Submit(t.Context(), job.Request{Tenant: tenant, Route: "fair", Key: key, Spec: spec,
					Body: fmt.Appendf(nil, `{"order_id":%q}`, key)})
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// run starts the workers with h and the dispatchers; both stop when the
// test ends.
func (e *fairEnv) run(t testing.TB, h asynq.Handler, cfg Config) {
	t.Helper()
	if cfg.Concurrency == 0 {
		cfg.Concurrency = 8
	}
	e.start(t, h, cfg, WithFairness(e.fair))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = e.fair.Run(ctx, e.sub, e.inspector) })
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
}

// recorder is a handler that records the start order and succeeds.
func (e *fairEnv) recorder() asynq.HandlerFunc {
	return func(_ context.Context, task *asynq.Task) error {
		e.started.add(task.Headers()[job.HeaderTenant], task.Headers()[job.HeaderID])
		return nil
	}
}

func count(seq []string, tenant string) int {
	n := 0
	for _, s := range seq {
		if s == tenant {
			n++
		}
	}
	return n
}

// A tenant with 10,000 jobs waiting does not make another tenant's 10
// wait behind them: the light tenant's jobs are all dispatched within
// 10·(wA+wB)/wB + window dispatches of its submit. (Counted in the pool's
// dispatch order: the order the jobs then start in also depends on how
// asynq's and the handlers' goroutines are scheduled, by up to a batch
// of dispatches and the workers' concurrency.)
func TestFairLightTenantStartsWithinBound(t *testing.T) {
	const window = 64
	e := newFairEnv(t, job.FairPool{Name: "tenants", DefaultWeight: 1, Window: window})
	e.submit(t, e.spec, "heavy", "h", 10000)
	e.run(t, e.recorder(), Config{})
	testkit.Eventually(t, "the heavy tenant's first starts", 60*time.Second, func() bool { return e.started.len() >= 200 })

	// Counted from the moment the light tenant's submit returned: each
	// of its jobs is tagged as it arrives, and the heavy tenant's jobs
	// keep starting while the submit runs.
	e.submit(t, e.spec, "light", "l", 10)
	dispatched, started := e.order.len(), e.started.len()
	testkit.Eventually(t, "the light tenant's 10 starts", 60*time.Second, func() bool {
		seq, _ := e.started.snapshot()
		return count(seq, "light") == 10
	})
	lastOf := func(seq []string) int {
		last := -1
		for i, s := range seq {
			if s == "light" {
				last = i
			}
		}
		return last
	}
	order, _ := e.order.snapshot()
	starts, _ := e.started.snapshot()
	bound := 10*(1+1)/1 + window
	took := max(lastOf(order)+1-dispatched, 0)
	if took > bound {
		t.Errorf("the light tenant's last job was dispatched %d dispatches after its submit; want at most %d", took, bound)
	}
	t.Logf("the light tenant's 10 jobs were all dispatched within %d dispatches of its submit, and started within %d starts (bound %d)",
		took, max(lastOf(starts)+1-started, 0), bound)
}

// Two tenants weighted 3:1, both backlogged, split the dispatches 75/25.
func TestFairWeightedSplit(t *testing.T) {
	e := newFairEnv(t, job.FairPool{Name: "tenants", DefaultWeight: 1, Weights: map[string]float64{"acme": 3}, Window: 16})
	e.submit(t, e.spec, "acme", "a", 900)
	e.submit(t, e.spec, "bigco", "b", 400)
	e.run(t, e.recorder(), Config{})
	testkit.Eventually(t, "1,000 dispatches", 60*time.Second, func() bool { return e.order.len() >= 1000 })
	seq, _ := e.order.snapshot()
	acme := count(seq[:1000], "acme")
	if acme < 700 || acme > 800 {
		t.Errorf("acme got %d of the first 1,000 dispatches; want 750 ± 50", acme)
	} else {
		t.Logf("acme (weight 3) got %d of 1,000 dispatches, bigco (weight 1) %d", acme, 1000-acme)
	}
}

// What the pool measured as it dispatched, read back from Redis as the
// console reads it: two tenants weighted 3:1, both backlogged, have
// about 75% and 25% of the dispatches, and their jobs' dwell is counted.
func TestFairMeasuredShareAndDwell(t *testing.T) {
	e := newFairEnv(t, job.FairPool{Name: "tenants", DefaultWeight: 1, Weights: map[string]float64{"acme": 3}, Window: 16})
	e.submit(t, e.spec, "acme", "a", 900)
	e.submit(t, e.spec, "bigco", "b", 900)
	e.start(t, e.recorder(), Config{Concurrency: 8}, WithFairness(e.fair))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = e.fair.Run(ctx, e.sub, e.inspector) })
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	// Stopped well before acme's 900 run out (about 1,200 dispatches),
	// so both tenants were backlogged for every dispatch counted.
	testkit.Eventually(t, "400 dispatches", 60*time.Second, func() bool { return e.order.len() >= 400 })
	cancel()
	wg.Wait()

	measured, err := e.fair.Measured(t.Context(), "tenants", 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	by := map[string]job.FairMeasure{}
	var total int64
	for _, m := range measured {
		by[m.Tenant] = m
		total += m.Dispatched
	}
	if len(measured) != 2 || total < 400 {
		t.Fatalf("measured %+v; want acme and bigco, at least 400 dispatches", measured)
	}
	if s := by["acme"].Share; s < 65 || s > 85 {
		t.Errorf("acme's measured share %.1f%%; want 75 ± 10", s)
	}
	if s := by["bigco"].Share; s < 15 || s > 35 {
		t.Errorf("bigco's measured share %.1f%%; want 25 ± 10", s)
	}
	for _, m := range measured {
		if m.Dwelt != m.Dispatched || m.DwellMean <= 0 || m.DwellP99 < m.DwellMean && m.DwellP99 != -1 {
			t.Errorf("%s: %d dispatched, %d dwell counted, mean %v, p99 ≤ %v; want every one counted, a mean above 0 and a p99 bound above it",
				m.Tenant, m.Dispatched, m.Dwelt, m.DwellMean, m.DwellP99)
		}
	}
	t.Logf("measured: acme %d (%.1f%%, dwell mean %v, p99 ≤ %v), bigco %d (%.1f%%, dwell mean %v, p99 ≤ %v)",
		by["acme"].Dispatched, by["acme"].Share, by["acme"].DwellMean, by["acme"].DwellP99,
		by["bigco"].Dispatched, by["bigco"].Share, by["bigco"].DwellMean, by["bigco"].DwellP99)
}

// A tenant that idled while another was served comes back at the pool's
// clock: it gets its share from then on, not a burst of the dispatches
// it did not use.
func TestFairIdleTenantBanksNoCredit(t *testing.T) {
	e := newFairEnv(t, job.FairPool{Name: "tenants", Window: 4})
	e.submit(t, e.spec, "steady", "s", 1500)
	e.submit(t, e.spec, "idler", "i", 5)
	e.run(t, e.recorder(), Config{})
	testkit.Eventually(t, "the idler's first jobs and 400 dispatches", 60*time.Second, func() bool {
		seq, _ := e.order.snapshot()
		return count(seq, "idler") == 5 && len(seq) >= 400
	})
	mark := e.order.len()
	e.submit(t, e.spec, "idler", "j", 100)
	testkit.Eventually(t, "100 dispatches after the idler's return", 60*time.Second, func() bool { return e.order.len() >= mark+100 })
	seq, _ := e.order.snapshot()
	got := count(seq[mark:mark+100], "idler")
	// Its fair share of 100 dispatches is 50; the dispatches between the
	// submit's first job and the mark may add one or two.
	if got > 55 {
		t.Errorf("the returning tenant got %d of the next 100 dispatches; want its share, about 50", got)
	} else {
		t.Logf("the returning tenant got %d of the next 100 dispatches", got)
	}
}

// A higher priority tier is dispatched before a lower one, whatever the
// tenants' positions: ops's urgent jobs, submitted last, take the first
// 20 dispatches, though by fairness alone ops would get a third of them.
func TestFairPriorityBeatsFairness(t *testing.T) {
	e := newFairEnv(t, job.FairPool{Name: "tenants", Window: 4})
	e.submit(t, e.spec, "acme", "a", 100)
	e.submit(t, e.spec, "bigco", "b", 100)
	e.submit(t, e.urgent, "ops", "u", 20)
	e.run(t, e.recorder(), Config{})
	testkit.Eventually(t, "60 dispatches", 60*time.Second, func() bool { return e.order.len() >= 60 })
	seq, _ := e.order.snapshot()
	if got := count(seq[:20], "ops"); got != 20 {
		t.Errorf("ops's urgent jobs got %d of the first 20 dispatches, want all 20: %v", got, seq[:20])
	}
}

// A retry re-enters at its tenant's current position, behind the jobs
// its tenant submitted after it, not at its old place.
func TestFairRetryReentersAtTenantPosition(t *testing.T) {
	e := newFairEnv(t, job.FairPool{Name: "tenants", Window: 1})
	e.submit(t, e.spec, "bigco", "x", 1) // x-0, bigco's first
	e.submit(t, e.spec, "bigco", "y", 9)
	e.submit(t, e.spec, "acme", "a", 10)
	x := job.ID("bigco", "fair", "x-0")
	var once sync.Once
	e.run(t, asynq.HandlerFunc(func(_ context.Context, task *asynq.Task) error {
		id := task.Headers()[job.HeaderID]
		e.started.add(task.Headers()[job.HeaderTenant], id)
		failed := false
		if id == x {
			once.Do(func() { failed = true })
		}
		if failed {
			return errors.New("first attempt fails")
		}
		time.Sleep(20 * time.Millisecond) // x's backoff (under 20ms) ends meanwhile
		return nil
	}), Config{})
	testkit.Eventually(t, "21 starts", 60*time.Second, func() bool { return e.started.len() >= 21 })
	_, ids := e.started.snapshot()
	if ids[0] != x {
		t.Fatalf("first start %s, want x (bigco's first job)", ids[0])
	}
	if ids[20] != x {
		t.Errorf("x's retry started at %d (%v); want it last, behind every job bigco submitted after it", slices.Index(ids[1:], x)+1, ids)
	}
}

// Losing the pool's keys mid-run loses no job and runs none twice: the
// relay files again every unfinished job it finds neither in the pool nor
// in asynq, and the effects, counted in PostgreSQL, are one per job.
func TestFairPoolFlushedMidRunLosesNoJob(t *testing.T) {
	e := newFairEnv(t, job.FairPool{Name: "tenants", Window: 8})
	const n = 300
	e.submit(t, e.spec, "acme", "a", n/2)
	e.submit(t, e.spec, "bigco", "b", n/2)
	deps := e.deps(nil, 5*time.Second)
	deps.Jobs = job.NewStore(e.pool)
	var calls atomic.Int64
	effect := plainEffect(e.pool, "w1", &calls)
	h := Handle(deps, fairTask, orderKey, orderResource, func(ctx context.Context, j Job[order]) (string, error) {
		time.Sleep(2 * time.Millisecond)
		return effect(ctx, j)
	})
	e.run(t, h, Config{})
	relay := job.NewRelay(e.sub, e.inspector, job.RelayOptions{After: 100 * time.Millisecond, Interval: 200 * time.Millisecond, Logger: testkit.Logger()})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = relay.Run(ctx) })
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})

	testkit.Eventually(t, "50 effects", 60*time.Second, func() bool { return calls.Load() >= 50 })
	keys, err := e.rdb.Keys(t.Context(), e.prefix+"fair:*").Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("the pool's keys: %v %v", keys, err)
	}
	if err := e.rdb.Del(t.Context(), keys...).Err(); err != nil {
		t.Fatal(err)
	}
	if done := calls.Load(); done > n-20 {
		t.Fatalf("%d effects before the flush: too few jobs were left to lose", done)
	}
	testkit.Eventually(t, "every job succeeded", 60*time.Second, func() bool {
		var left int
		err := e.pool.QueryRow(t.Context(), `SELECT count(*) FROM jobs WHERE task = $1 AND status <> 'succeeded'`, fairTask).Scan(&left)
		return err == nil && left == 0
	})
	var rows, keysDone int
	if err := e.pool.QueryRow(t.Context(), `SELECT count(*), count(DISTINCT job_key) FROM effects`).Scan(&rows, &keysDone); err != nil {
		t.Fatal(err)
	}
	if rows != n || keysDone != n {
		t.Errorf("effects: %d rows for %d jobs; want exactly %d, one per job", rows, keysDone, n)
	}
}

// A dispatcher that moved jobs into flight but could not enqueue their
// tasks (it died, or asynq's Redis failed it) leaves them in the window:
// the reconcile pass enqueues the tasks of those still unfinished.
func TestFairReconcileEnqueuesJobsInFlightWithoutTask(t *testing.T) {
	e := newFairEnv(t, job.FairPool{Name: "tenants", Window: 5})
	e.submit(t, e.spec, "acme", "a", 8)
	broken := asynq.NewClient(asynq.RedisClientOpt{Addr: "127.0.0.1:1", DialTimeout: 100 * time.Millisecond})
	defer broken.Close()
	lost := job.NewSubmitter(e.pool, broken)
	lost.Fairness = e.fair
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = e.fair.Run(ctx, lost, e.inspector) })
	inflight := e.prefix + "fair:{fair:tenants}:inflight"
	testkit.Eventually(t, "5 jobs in flight", 60*time.Second, func() bool { n, _ := e.rdb.ZCard(t.Context(), inflight).Result(); return n == 5 })
	cancel()
	wg.Wait()
	if qi, err := e.inspector.GetQueueInfo(e.queue); err == nil && qi.Size > 0 {
		t.Fatalf("asynq holds %d tasks; the broken dispatch should have enqueued none", qi.Size)
	}

	sent, err := e.fair.Reconcile(t.Context(), e.sub, e.inspector, "tenants", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(sent) != 5 {
		t.Fatalf("reconcile re-enqueued %v; want the 5 jobs in flight", sent)
	}
	for _, id := range sent {
		if _, err := e.inspector.GetTaskInfo(e.queue, id); err != nil {
			t.Errorf("task %s: %v", id, err)
		}
	}
	e.run(t, e.recorder(), Config{})
	testkit.Eventually(t, "all 8 jobs started and the pool empty", 60*time.Second, func() bool {
		n, _ := e.rdb.ZCard(t.Context(), inflight).Result()
		entries, _ := e.rdb.HLen(t.Context(), e.prefix+"fair:{fair:tenants}:jobs").Result()
		return e.started.len() >= 8 && n == 0 && entries == 0
	})
}

// With broker shards, each shard keeps its own window: tenants spread
// over three shards get the pool's window in each.
func TestFairWindowPerShard(t *testing.T) {
	e := newFairEnv(t, job.FairPool{Name: "tenants", Window: 2})
	e.fair.Shards = 3
	e.sub.Shards = 3
	for i := range 30 {
		e.submit(t, e.spec, fmt.Sprintf("tenant-%d", i), "k", 1)
	}
	broken := asynq.NewClient(asynq.RedisClientOpt{Addr: "127.0.0.1:1", DialTimeout: 100 * time.Millisecond})
	defer broken.Close()
	lost := job.NewSubmitter(e.pool, broken)
	lost.Fairness, lost.Shards = e.fair, 3
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = e.fair.Run(ctx, lost, e.inspector) })
	inflight := func(shard int) int64 {
		n, _ := e.rdb.ZCard(t.Context(), fmt.Sprintf("%sfair:{fair:tenants:%d}:inflight", e.prefix, shard)).Result()
		return n
	}
	testkit.Eventually(t, "each shard's window full", 60*time.Second, func() bool { return inflight(0)+inflight(1)+inflight(2) == 6 })
	cancel()
	wg.Wait()
	for shard := range 3 {
		if n := inflight(shard); n != 2 {
			t.Errorf("shard %d: %d jobs in flight, want its window, 2", shard, n)
		}
	}

	// Every job still runs, from its shard's queue.
	if _, err := e.fair.Reconcile(t.Context(), e.sub, e.inspector, "tenants", 0); err != nil {
		t.Fatal(err)
	}
	queues := map[string]int{}
	for _, q := range job.ShardQueues(e.queue, 3) {
		queues[q] = 1
		t.Cleanup(func() { _ = e.inspector.DeleteQueue(q, true) })
	}
	e.run(t, e.recorder(), Config{Queues: queues})
	testkit.Eventually(t, "all 30 jobs started", 60*time.Second, func() bool { return e.started.len() >= 30 })
}

// revOrder is the payload of the debounced test jobs: an order and the
// revision a submit carried.
type revOrder struct {
	OrderID string `json:"order_id"`
	Rev     int    `json:"rev"`
}

// submitRev submits revision rev of order o-1 of acme under key.
func (e *fairEnv) submitRev(t *testing.T, key string, rev int) job.Row {
	t.Helper()
	r, err := e.sub.Submit(t.Context(), job.Request{Tenant: "acme", Route: "fair", Key: key, Spec: e.debounced,
		Body: fmt.Appendf(nil, `{"order_id":"o-1","rev":%d}`, rev)})
	if err != nil {
		t.Fatalf("submit %s: %v", key, err)
	}
	return r
}

// revHandler runs the debounced jobs and records each revision it ran.
func (e *fairEnv) revHandler(obs Observer) (asynq.Handler, func() []int) {
	deps := e.deps(obs, 5*time.Second)
	deps.Jobs = job.NewStore(e.pool)
	var mu sync.Mutex
	var revs []int
	key := func(o revOrder) string { return orderKey(order{OrderID: o.OrderID}) }
	resource := func(o revOrder) string { return orderResource(order{OrderID: o.OrderID}) }
	h := Handle(deps, fairDebounced, key, resource, func(_ context.Context, j Job[revOrder]) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		revs = append(revs, j.Payload.Rev)
		return fmt.Sprintf("rev-%d", j.Payload.Rev), nil
	})
	return h, func() []int {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(revs)
	}
}

// settled reports whether job id succeeded and the pool is empty: no
// entry left, nothing in flight.
func (e *fairEnv) settled(t *testing.T, id string) bool {
	r, err := e.sub.Get(t.Context(), "acme", id)
	if err != nil || r.Status != job.StatusSucceeded {
		return false
	}
	backlog, inFlight, err := e.fair.Backlog(t.Context(), "tenants")
	return err == nil && len(backlog) == 0 && inFlight == 0
}

// Twenty submits folded into one debounced job in a pool make one
// dispatch, of the latest body: each submit files its version and takes
// the one it superseded out, and the pool is empty once the job ran.
func TestFairDebouncedFoldsIntoOneDispatch(t *testing.T) {
	e := newFairEnv(t, job.FairPool{Name: "tenants", Window: 4})
	e.sub.Inspector = e.inspector
	// Nineteen at once, racing to file and take out their versions, then
	// the twentieth, whose body is the latest.
	var wg sync.WaitGroup
	for i := range 19 {
		wg.Go(func() { e.submitRev(t, fmt.Sprintf("d-%d", i), i+1) })
	}
	wg.Wait()
	last := e.submitRev(t, "d-19", 20)
	if last.Debounce == nil || last.Debounce.Coalesced != 20 {
		t.Fatalf("the last submit's job: %+v; want 20 submits folded into one", last.Debounce)
	}
	// The latest version waits in the delayed set, due at the job's
	// not_before, outside the window.
	due, err := e.rdb.ZScore(t.Context(), e.prefix+"fair:{fair:tenants}:delayed", job.TaskID(last)).Result()
	if err != nil || int64(due) != job.ProcessAt(*last.NotBefore).UnixMilli() {
		t.Errorf("version 20 in the delayed set: due %v (%v); want the job's not_before, %s", due, err, last.NotBefore)
	}
	h, revs := e.revHandler(nil)
	e.run(t, h, Config{})
	testkit.Eventually(t, "the job succeeded and its pool empty", 60*time.Second, func() bool { return e.settled(t, last.ID) })
	if got := revs(); !slices.Equal(got, []int{20}) {
		t.Errorf("the handler ran revisions %v; want one run, of the latest, 20", got)
	}
	if n := e.order.len(); n != 1 {
		t.Errorf("the pool dispatched %d tasks; want 1", n)
	}
	t.Logf("20 folded submits: %d dispatch, revisions run %v, in flight after: 0", e.order.len(), revs())
}

// A version already dispatched when a later submit changes its job leaves
// the pool's window at that submit; its task, still in asynq, is refused
// by the take, and the latest version runs, once.
func TestFairDebouncedVersionInFlightIsRefused(t *testing.T) {
	e := newFairEnv(t, job.FairPool{Name: "tenants", Window: 1})
	inflight := e.prefix + "fair:{fair:tenants}:inflight"
	// The dispatcher alone, no worker: version 1 goes to asynq, due.
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = e.fair.Run(ctx, e.sub, e.inspector) })
	first := e.submitRev(t, "v-1", 1)
	testkit.Eventually(t, "version 1 in flight, its task in asynq", 60*time.Second, func() bool {
		_, err := e.inspector.GetTaskInfo(e.queue, first.ID)
		n, _ := e.rdb.ZCard(t.Context(), inflight).Result()
		return err == nil && n == 1
	})
	cancel()
	wg.Wait()

	second := e.submitRev(t, "v-2", 2)
	if second.ID != first.ID || job.TaskID(second) == first.ID {
		t.Fatalf("the second submit: job %s, task %s; want job %s folded into a new version", second.ID, job.TaskID(second), first.ID)
	}
	if n, err := e.rdb.ZCard(t.Context(), inflight).Result(); err != nil || n != 0 {
		t.Errorf("after the fold, %d in flight (%v); want the superseded version out of the window", n, err)
	}
	if _, err := e.inspector.GetTaskInfo(e.queue, first.ID); err != nil {
		t.Fatalf("version 1's task: %v; want it still in asynq (the submitter has no inspector to delete it)", err)
	}

	obs := newRecorder()
	h, revs := e.revHandler(obs)
	e.run(t, h, Config{})
	testkit.Eventually(t, "the job succeeded and its pool empty", 60*time.Second, func() bool { return e.settled(t, first.ID) })
	if got := revs(); !slices.Equal(got, []int{2}) {
		t.Errorf("the handler ran revisions %v; want one run, of version 2", got)
	}
	testkit.Eventually(t, "version 1's task refused", 60*time.Second, func() bool { return obs.count("attempt:"+ClassSuperseded) == 1 })
}
