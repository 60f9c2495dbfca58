package workers

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/workers/fence"
	"github.com/idemgate/idemgate/workers/lock"
)

// A worker cut from Redis while its job runs: it stops when its lock
// lease runs out, its asynq task stays active (it cannot tell the broker),
// and the relay of another worker hands the job over once the lock is
// gone, within a few lock TTLs — long before asynq's own lease (30s) and
// recoverer could. The effect is applied once, with the new owner's
// higher token, and the old owner's late write is refused.
func TestTakeoverOfAJobWhoseWorkerLostItsLock(t *testing.T) {
	t.Parallel()
	s := newServerEnv(t)
	const ttl = 2 * time.Second
	records := job.NewStore(s.pool)
	spec := orderSpec(t, s.queue)

	// Worker A reaches Redis, for its queue and its locks, through a proxy.
	viaProxy, proxy := testkit.Proxied(t, testkit.RedisURL(t))
	aOpt, err := asynq.ParseRedisURI(viaProxy)
	if err != nil {
		t.Fatal(err)
	}
	ropt, err := redis.ParseURL(viaProxy)
	if err != nil {
		t.Fatal(err)
	}
	aRedis := redis.NewClient(ropt)

	type started struct{ token int64 }
	aStarted := make(chan started, 1)
	bApplied := make(chan struct{})
	aLate := make(chan error, 1)
	aFn := func(ctx context.Context, j Job[order]) (string, error) {
		aStarted <- started{j.Token}
		<-ctx.Done() // the lease: lost once A cannot renew it
		// The request that was in flight reaches the data late, after
		// the new owner's.
		select {
		case <-bApplied:
		case <-time.After(60 * time.Second):
		}
		aLate <- pgx.BeginFunc(context.Background(), s.pool, func(tx pgx.Tx) error {
			if err := fence.Check(context.Background(), tx, j.Resource, j.Token); err != nil {
				return err
			}
			_, err := tx.Exec(context.Background(), `INSERT INTO effects (job_key, resource, token, worker) VALUES ($1, $2, $3, 'A')`,
				j.Key, j.Resource, j.Token)
			return err
		})
		return "", context.Cause(ctx)
	}
	var once sync.Once
	bFn := func(ctx context.Context, j Job[order]) (string, error) {
		ref, err := idempotentEffect(ctx, s.pool, j, "B")
		once.Do(func() { close(bApplied) })
		return ref, err
	}
	depsA := s.deps(nil, ttl)
	depsA.Redis, depsA.OnStatus, depsA.Worker = aRedis, records.Follow, "A"
	depsB := s.deps(nil, ttl)
	depsB.OnStatus, depsB.Worker = records.Follow, "B"

	// A starts alone and takes the job.
	srvA, err := NewServer(aOpt, Config{Queues: map[string]int{s.queue: 1}, ShutdownTimeout: 2 * time.Second},
		Handle(depsA, kind, orderKey, orderResource, aFn), WithLogger(testkit.Logger()),
		WithAsynqConfig(func(c *asynq.Config) { c.TaskCheckInterval = 50 * time.Millisecond }))
	if err != nil {
		t.Fatal(err)
	}
	ctxA, stopA := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = srvA.Run(ctxA) })
	t.Cleanup(func() {
		proxy.Thaw() // A may shut down cleanly
		stopA()
		wg.Wait()
		_ = aRedis.Close()
	})
	sub := job.NewSubmitter(s.pool, s.client)
	j, err := sub.Submit(t.Context(), job.Request{Tenant: "acme", Route: "orders", Key: "k-t1", Spec: spec, Queue: s.queue,
		Body: []byte(`{"order_id":"t1"}`)})
	if err != nil {
		t.Fatal(err)
	}
	var a started
	select {
	case a = <-aStarted:
	case <-time.After(60 * time.Second):
		t.Fatal("worker A never started the job")
	}

	// B and its relay start; then A is cut from Redis.
	s.start(t, Handle(depsB, kind, orderKey, orderResource, bFn), Config{})
	locks, err := lock.New(s.rdb, lock.Options{Prefix: s.prefix, TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	relay := job.NewRelay(sub, s.inspector, job.RelayOptions{After: time.Hour, Interval: time.Hour, Locks: locks, LockTTL: ttl,
		Logger: testkit.Logger()})
	ctxR, stopR := context.WithCancel(context.Background())
	var relayWG sync.WaitGroup
	relayWG.Go(func() { _ = relay.Run(ctxR) })
	t.Cleanup(func() { stopR(); relayWG.Wait() })

	cut := time.Now()
	proxy.Freeze()
	select {
	case <-bApplied:
	case <-time.After(60 * time.Second):
		t.Fatal("no other worker took the job over")
	}
	// asynq could hand the task over only after its 30s lease, and 30s
	// more of the recoverer's margin: well under that is the takeover.
	took := time.Since(cut)
	t.Logf("taken over %s after the worker was cut off (lock_ttl %s)", took.Round(time.Millisecond), ttl)
	if took > 20*time.Second {
		t.Fatalf("the job was taken over %s after its worker was cut off: not the takeover, asynq's recovery", took)
	}
	if info, err := s.inspector.GetTaskInfo(s.queue, j.ID); err != nil || info.State != asynq.TaskStateActive {
		t.Fatalf("the original task: %+v, %v; want it still active under A's asynq lease", info, err)
	}
	select {
	case err := <-aLate:
		if !errors.Is(err, fence.ErrStaleToken) {
			t.Fatalf("A's late write: %v, want refused for its stale token", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("A's late write never came")
	}
	effects := s.effects(t, "effect:t1")
	if len(effects) != 1 || effects[0].Worker != "B" || effects[0].Token <= a.token {
		t.Fatalf("effects = %+v, want one by B with a token above A's %d", effects, a.token)
	}
	testkit.Eventually(t, "the job to succeed", 60*time.Second, func() bool {
		r, err := records.ByID(t.Context(), j.ID)
		return err == nil && r.Status == job.StatusSucceeded
	})
	var aOutcome, bOutcome, bWorker string
	err = s.pool.QueryRow(t.Context(), `SELECT
  (SELECT coalesce(outcome, '') FROM job_attempts WHERE job_id = $1 AND fencing_token = $2),
  (SELECT coalesce(outcome, '') FROM job_attempts WHERE job_id = $1 AND fencing_token = $3),
  (SELECT worker FROM job_attempts WHERE job_id = $1 AND fencing_token = $3)`, j.ID, a.token, effects[0].Token).
		Scan(&aOutcome, &bOutcome, &bWorker)
	if err != nil {
		t.Fatal(err)
	}
	if (aOutcome != "lock_lost" && aOutcome != "crashed") || bOutcome != "succeeded" || bWorker != "B" {
		t.Fatalf("ledger: A's attempt %q, B's %q by %q; want lock_lost (or crashed), then succeeded by B", aOutcome, bOutcome, bWorker)
	}
}

// A job cancelled while its worker is dead (its attempt open, its lock
// expiring): the takeover task is refused by the take as any task of a
// cancelled job is, the job ends cancelled, and nothing runs.
func TestTakeoverOfACancelledJob(t *testing.T) {
	t.Parallel()
	s := newServerEnv(t)
	const ttl = time.Second
	records := job.NewStore(s.pool)
	spec := orderSpec(t, s.queue)
	sub := job.NewSubmitter(s.pool, s.client)
	j, err := sub.Submit(t.Context(), job.Request{Tenant: "acme", Route: "orders", Key: "k-t2", Spec: spec, Queue: s.queue,
		Body: []byte(`{"order_id":"t2"}`)})
	if err != nil {
		t.Fatal(err)
	}
	// The task is delivered to a worker that dies once it has taken the
	// job; asynq would keep the task active under that worker's lease.
	if err := s.inspector.DeleteTask(s.queue, j.ID); err != nil {
		t.Fatal(err)
	}
	deps := s.deps(nil, ttl)
	deps.OnStatus = records.Follow
	var calls atomic.Int64
	dead := Handle(deps, kind, orderKey, orderResource, plainEffect(s.pool, "A", &calls), crashAt(stageTaken))
	task := asynq.NewTaskWithHeaders(kind, []byte(`{"order_id":"t2"}`), map[string]string{job.HeaderID: j.ID, job.HeaderTenant: "acme"})
	if err := dead.ProcessTask(t.Context(), task); !errors.Is(err, errCrashed) {
		t.Fatalf("the dying delivery: %v", err)
	}
	if _, stopping, err := records.Cancel(t.Context(), "acme", j.ID); err != nil || !stopping {
		t.Fatalf("cancel: stopping %v, %v; want the job cancelling", stopping, err)
	}

	locks, err := lock.New(s.rdb, lock.Options{Prefix: s.prefix, TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	relay := job.NewRelay(sub, s.inspector, job.RelayOptions{Locks: locks, LockTTL: ttl, Logger: testkit.Logger()})
	testkit.Eventually(t, "the takeover task", 60*time.Second, func() bool {
		p, err := relay.TakeOver(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return len(p.Enqueued) == 1
	})
	s.start(t, Handle(deps, kind, orderKey, orderResource, plainEffect(s.pool, "B", &calls)), Config{})
	testkit.Eventually(t, "the job to end cancelled", 60*time.Second, func() bool {
		r, err := records.ByID(t.Context(), j.ID)
		return err == nil && r.Status == job.StatusCancelled
	})
	testkit.Eventually(t, "the takeover task acked", 60*time.Second, func() bool {
		qi := s.queueInfo(t)
		return qi.Size == 0 && qi.Active == 0
	})
	if n := calls.Load(); n != 0 {
		t.Fatalf("the business function ran %d times for a cancelled job", n)
	}
}
