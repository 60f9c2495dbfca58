package workers

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/idemgate/idemgate/internal/e2e/chaos"
	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/internal/testkit/faultproxy"
	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/migrations"
	"github.com/idemgate/idemgate/workers/execution"
	"github.com/idemgate/idemgate/workers/lock"
)

// PostgreSQL killed with SIGKILL (the postmaster and every backend at
// once, as the crash of its host) at each point of a job's three round
// trips under HandleTx: the take, sent with synchronous_commit off; BEGIN
// with the effect's first statement; the completion with COMMIT. Whatever
// the point, the effect is applied once, no fencing token is handed to two
// attempts, and no accepted job is lost.

// killable is a private PostgreSQL cluster, with idemgate's migrations and
// the effects table, that a test kills and starts again. Its WAL writer
// waits wal_writer_delay's maximum, 10 s, between rounds, so a commit made
// with synchronous_commit off stays in shared memory until a synchronous
// one writes it; autovacuum is off, as an automatic ANALYZE commits
// synchronously and would write it at a moment of its own.
type killable struct {
	pg  *chaos.Postgres
	url string
	// check is the test's own pool, for setting up and reading what the
	// worker left. It is emptied after each restart; a worker's pool is
	// not, and meets the connections the kill broke as a worker would.
	check *pgxpool.Pool
}

func startKillable(t *testing.T) *killable {
	t.Helper()
	testkit.PostgresURL(t) // runs where the integration tests run
	ctx := t.Context()
	dir := t.TempDir()
	// As root, the server runs as the postgres user, which must reach dir.
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	pg, err := chaos.StartPostgres(ctx, filepath.Join(dir, "postgres"), "wal_writer_delay=10s", "autovacuum=off")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pg.Close)
	if err := pg.CreateDatabase(ctx, "idemgate"); err != nil {
		t.Fatal(err)
	}
	k := &killable{pg: pg, url: chaos.URL(pg.Addr(), "idemgate")}
	cfg, err := pgx.ParseConfig(k.url)
	if err != nil {
		t.Fatal(err)
	}
	db := stdlib.OpenDB(*cfg)
	err = migrations.Up(ctx, db)
	_ = db.Close()
	if err != nil {
		t.Fatal(err)
	}
	k.check = testkit.PoolAt(t, k.url)
	if _, err := k.check.Exec(ctx, effectsTable); err != nil {
		t.Fatal(err)
	}
	return k
}

// kill kills the cluster and returns once every process of it is gone.
func (k *killable) kill(t *testing.T) error {
	t.Helper()
	if err := k.pg.Kill(); err != nil {
		t.Errorf("kill PostgreSQL: %v", err)
		return err
	}
	return nil
}

// restart starts the killed cluster again, after its crash recovery.
func (k *killable) restart(t *testing.T) {
	t.Helper()
	if err := k.pg.Start(t.Context()); err != nil {
		t.Fatalf("restart PostgreSQL: %v", err)
	}
	k.check.Reset()
}

// env is a test's services on the cluster: its rows, a lock prefix of its
// own on the shared Redis.
func (k *killable) env(t *testing.T) *env {
	return &env{pool: k.check, rdb: testkit.Redis(t), prefix: testkit.Prefix(), store: execution.New(k.check)}
}

// deps is a worker's dependencies on pool, a pool of its own on the
// cluster.
func (k *killable) deps(e *env, pool *pgxpool.Pool) Deps {
	return Deps{
		DB: pool, Redis: e.rdb, Jobs: job.NewStore(pool),
		Lock:   lock.Options{Prefix: e.prefix, TTL: 5 * time.Second},
		Logger: testkit.Logger(), Worker: "A",
	}
}

// deliverThrough delivers task to h until it is acked, as asynq retries a
// failed delivery (the database refusing connections while it recovers,
// a pooled connection the kill broke), and returns how many failed. A
// delivery that would archive the task fails the test.
func deliverThrough(t *testing.T, h asynq.Handler, task *asynq.Task) int {
	t.Helper()
	failed := 0
	testkit.Eventually(t, "the task acked", 60*time.Second, func() bool {
		err := h.ProcessTask(t.Context(), task)
		if errors.Is(err, asynq.SkipRetry) {
			t.Fatalf("delivery %d archived the task: %v", failed+1, err)
		}
		if err != nil {
			failed++
		}
		return err == nil
	})
	return failed
}

// attemptRow is one row of the ledger.
type attemptRow struct {
	Key      string
	Resource string
	Token    int64
	Outcome  string
}

// ledger lists the attempts of the jobs with keys that drew a token, in
// order.
func (e *env) ledger(t *testing.T, keys ...string) []attemptRow {
	t.Helper()
	rows, err := e.pool.Query(t.Context(), `SELECT key, resource, fencing_token, coalesce(outcome, 'open') FROM job_attempts
 WHERE key = ANY($1) AND fencing_token IS NOT NULL ORDER BY id`, keys)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[attemptRow])
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// increasing reports whether tokens rise strictly, so none repeats.
func increasing(tokens []int64) bool {
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			return false
		}
	}
	return true
}

// checkOnce checks what a user sees of job id with key once it is done:
// one effect, written under the last token the function was given, and
// the job succeeded under it; every token the function saw is new and
// higher than the one before; no ledger row carries lost (a token whose
// take the kill lost; 0 for none), and the last ends succeeded under the
// effect's token.
func (e *env) checkOnce(t *testing.T, id, key string, seen []int64, lost int64) {
	t.Helper()
	effects := e.effects(t, key)
	rec := e.recordOf(t, "acme", key)
	if len(effects) != 1 || effects[0].Token != seen[len(seen)-1] || rec.Status != job.StatusSucceeded || rec.FencingToken != effects[0].Token {
		t.Fatalf("effects %+v, execution %s under %d, tokens seen %v: want one effect, succeeded, under the last token seen",
			effects, rec.Status, rec.FencingToken, seen)
	}
	if !increasing(seen) {
		t.Fatalf("tokens the function saw = %v, want each higher than the one before", seen)
	}
	if got := e.jobDoc(t, id); got != fmt.Sprintf("succeeded #%d %q finished=true", rec.Attempts, rec.ResultRef) {
		t.Fatalf("job document = %s, want succeeded with the execution's result", got)
	}
	ledger := e.ledger(t, key)
	if len(ledger) == 0 || ledger[len(ledger)-1].Outcome != "succeeded" || ledger[len(ledger)-1].Token != effects[0].Token {
		t.Fatalf("ledger = %+v, want its last attempt succeeded under token %d", ledger, effects[0].Token)
	}
	for _, a := range ledger {
		if a.Token == lost {
			t.Fatalf("ledger = %+v holds the lost token %d", ledger, lost)
		}
	}
}

func TestPostgresKilled(t *testing.T) {
	t.Parallel()
	k := startKillable(t)

	// Killed after the take returned, before the effect's first
	// statement: the take, committed without its WAL flush, is lost with
	// the token it drew (its execution state, its ledger row, the job
	// document's start), which reached nothing outside the database.
	// The delivery fails; the next ones draw a higher token (the clock
	// floor: the counter's row went back with the take) and apply the
	// effect once.
	t.Run("before the effect", func(t *testing.T) {
		e := k.env(t)
		id, task := e.submitJob(t, "acme", "a1", job.StatusQueued)
		var seen []int64
		h := HandleTx(k.deps(e, testkit.PoolAt(t, k.url)), kind, orderKey, orderResource,
			func(ctx context.Context, tx pgx.Tx, j Job[order]) (string, error) {
				seen = append(seen, j.Token)
				if len(seen) == 1 {
					if err := k.kill(t); err != nil {
						return "", err
					}
				}
				if err := insertEffect(ctx, tx, j, "A"); err != nil {
					return "", err
				}
				return fmt.Sprintf("effect-%d", j.Token), nil
			})
		// Held, the WAL writer cannot write the take's commit in the
		// moment between the take and the kill.
		if err := k.pg.HoldWALWriter(); err != nil {
			t.Fatal(err)
		}
		if err := h.ProcessTask(t.Context(), task); err == nil {
			t.Fatal("the delivery PostgreSQL died under was acked")
		}
		k.restart(t)

		lost := seen[0]
		if rec, err := e.store.Get(t.Context(), "acme", "effect:a1"); !errors.Is(err, execution.ErrNotFound) {
			t.Fatalf("execution after the restart = %+v (%v), want none: the take that drew token %d is lost", rec, err, lost)
		}
		if got := e.ledger(t, "effect:a1"); len(got) != 0 {
			t.Fatalf("ledger after the restart = %+v, want no attempt: the take is lost", got)
		}
		if got, want := e.jobDoc(t, id), `queued #0 "" finished=false`; got != want {
			t.Fatalf("job document after the restart = %s, want %s, as before the take", got, want)
		}
		deliverThrough(t, h, task)
		e.checkOnce(t, id, "effect:a1", seen, lost)
	})

	// Killed after the effect's first statement (BEGIN and the insert, in
	// one round trip), before the function returns: the transaction dies
	// with the server, and the completion behind it fails. Nothing of the
	// effect is left; the retry writes it once.
	t.Run("during the effect", func(t *testing.T) {
		e := k.env(t)
		id, task := e.submitJob(t, "acme", "b1", job.StatusQueued)
		var seen []int64
		h := HandleTx(k.deps(e, testkit.PoolAt(t, k.url)), kind, orderKey, orderResource,
			func(ctx context.Context, tx pgx.Tx, j Job[order]) (string, error) {
				seen = append(seen, j.Token)
				if err := insertEffect(ctx, tx, j, "A"); err != nil {
					return "", err
				}
				if len(seen) == 1 {
					if err := k.kill(t); err != nil {
						return "", err
					}
				}
				return fmt.Sprintf("effect-%d", j.Token), nil
			})
		if err := h.ProcessTask(t.Context(), task); err == nil {
			t.Fatal("the delivery PostgreSQL died under was acked")
		}
		k.restart(t)
		if got := e.effects(t, "effect:b1"); len(got) != 0 {
			t.Fatalf("effects after the restart = %+v, want none: the transaction died uncommitted", got)
		}
		deliverThrough(t, h, task)
		e.checkOnce(t, id, "effect:b1", seen, seen[0])
	})

	// Killed after the delivery was acked: the completion went out with
	// COMMIT, a synchronous commit, so the effect and the success are both
	// there after the restart, and a duplicate delivery is acked without
	// running the function.
	t.Run("after the success", func(t *testing.T) {
		e := k.env(t)
		id, task := e.submitJob(t, "acme", "c1", job.StatusQueued)
		var seen []int64
		h := HandleTx(k.deps(e, testkit.PoolAt(t, k.url)), kind, orderKey, orderResource,
			func(ctx context.Context, tx pgx.Tx, j Job[order]) (string, error) {
				seen = append(seen, j.Token)
				if err := insertEffect(ctx, tx, j, "A"); err != nil {
					return "", err
				}
				return fmt.Sprintf("effect-%d", j.Token), nil
			})
		if err := h.ProcessTask(t.Context(), task); err != nil {
			t.Fatal(err)
		}
		if err := k.kill(t); err != nil {
			t.FailNow()
		}
		k.restart(t)
		e.checkOnce(t, id, "effect:c1", seen, 0)
		if got, want := e.outcomes(t, id), []string{"succeeded"}; !slices.Equal(got, want) {
			t.Fatalf("ledger = %q, want %q", got, want)
		}
		deliverThrough(t, h, task)
		if len(seen) != 1 {
			t.Fatalf("the function ran %d times, want once: the duplicate is acked from the state", len(seen))
		}
		e.checkOnce(t, id, "effect:c1", seen, 0)
	})

	// Killed after the completion and its COMMIT reached PostgreSQL and
	// committed, before their answer reached the worker (a proxy holds
	// what the server sends, and loses it with the kill): the worker
	// cannot tell a commit from a rollback, and its delivery fails. After
	// the restart the effect and the success are there, and the next
	// delivery is acked from the state without running the function.
	t.Run("answer to the commit lost", func(t *testing.T) {
		e := k.env(t)
		id, task := e.submitJob(t, "acme", "f1", job.StatusQueued)
		proxy, err := faultproxy.New(k.pg.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = proxy.Close() })
		// One connection, which a first job leaves with the statements
		// prepared: pgx prepares a statement new to a connection in a
		// round trip of its own, which would wait for a held answer
		// before the completion and COMMIT went out.
		pool := testkit.PoolAt(t, chaos.URL(proxy.Addr(), "idemgate")+"&pool_max_conns=1")
		var seen []int64
		h := HandleTx(k.deps(e, pool), kind, orderKey, orderResource,
			func(ctx context.Context, tx pgx.Tx, j Job[order]) (string, error) {
				if err := insertEffect(ctx, tx, j, "A"); err != nil {
					return "", err
				}
				if j.Key == "effect:f1" {
					seen = append(seen, j.Token)
					if len(seen) == 1 {
						// What PostgreSQL answers from now on is held.
						proxy.SetDelay(time.Hour)
					}
				}
				return fmt.Sprintf("effect-%d", j.Token), nil
			})
		if _, first := e.submitJob(t, "acme", "f0", job.StatusQueued); h.ProcessTask(t.Context(), first) != nil {
			t.Fatal("the first job failed")
		}
		done := make(chan struct{})
		var delivered error
		go func() {
			defer close(done)
			delivered = h.ProcessTask(t.Context(), task)
		}()
		defer func() { proxy.CloseConns(); <-done }()
		testkit.Eventually(t, "the success committed", 60*time.Second, func() bool {
			rec, err := e.store.Get(t.Context(), "acme", "effect:f1")
			return err == nil && rec.Status == job.StatusSucceeded
		})
		proxy.Freeze()
		if err := k.kill(t); err != nil {
			t.FailNow()
		}
		proxy.DropHeld()
		proxy.SetDelay(0)
		proxy.Thaw()
		<-done
		if delivered == nil {
			t.Fatal("the delivery whose commit went unanswered was acked")
		}
		k.restart(t)
		e.checkOnce(t, id, "effect:f1", seen, 0)
		deliverThrough(t, h, task)
		if len(seen) != 1 {
			t.Fatalf("the function ran %d times, want once: the next delivery is acked from the state", len(seen))
		}
		e.checkOnce(t, id, "effect:f1", seen, 0)
		if got, want := e.outcomes(t, id), []string{"succeeded"}; !slices.Equal(got, want) {
			t.Fatalf("ledger = %q, want %q", got, want)
		}
	})

	// Handle's take waits for its WAL flush, as a function that sends the
	// token out before anything commits needs: a partner that saw the
	// token before the kill (the WAL writer held, as above) never sees it
	// again, nor a lower one. The take survives the kill, its attempt
	// ends as crashed, and the next attempt's token is higher than the
	// one sent.
	t.Run("token sent out", func(t *testing.T) {
		e := k.env(t)
		id, task := e.submitJob(t, "acme", "e1", job.StatusQueued)
		pool := testkit.PoolAt(t, k.url)
		var sent []int64 // the partner's log of the tokens it was sent
		h := Handle(k.deps(e, pool), kind, orderKey, orderResource, func(ctx context.Context, j Job[order]) (string, error) {
			sent = append(sent, j.Token)
			if len(sent) == 1 {
				if err := k.kill(t); err != nil {
					return "", err
				}
				return "", errors.New("no answer from the partner (simulated)")
			}
			return idempotentEffect(ctx, pool, j, "A")
		})
		if err := k.pg.HoldWALWriter(); err != nil {
			t.Fatal(err)
		}
		if err := h.ProcessTask(t.Context(), task); err == nil {
			t.Fatal("the delivery PostgreSQL died under was acked")
		}
		k.restart(t)
		if rec := e.recordOf(t, "acme", "effect:e1"); rec.Status != job.StatusProcessing || rec.FencingToken != sent[0] {
			t.Fatalf("execution after the restart = %+v, want processing under the token sent out, %d", rec, sent[0])
		}
		deliverThrough(t, h, task)
		if len(sent) < 2 || !increasing(sent) {
			t.Fatalf("tokens the partner was sent = %v, want a higher one after the restart", sent)
		}
		e.checkOnce(t, id, "effect:e1", sent, 0)
		if got := e.ledger(t, "effect:e1"); got[0].Token != sent[0] || got[0].Outcome != "crashed" {
			t.Fatalf("ledger = %+v, want the attempt under the token sent out first, ended as crashed", got)
		}
	})

	t.Run("under load", func(t *testing.T) { killedUnderLoad(t, k) })
}

// drawn is a token a business function was given.
type drawn struct {
	Resource string
	Token    int64
	Key      string
}

// killedUnderLoad runs jobs jobs on resources resources (several jobs per
// resource, so they share its token counter and its lock), from workers
// goroutines calling ProcessTask and retrying every failed delivery as
// asynq would, and kills PostgreSQL twice while they run. At the end
// every job has succeeded with exactly one effect, and no token was ever
// handed to two attempts: neither among those the functions saw nor in
// the ledger, and one resource's tokens rose in the order the functions
// saw them.
func killedUnderLoad(t *testing.T, k *killable) {
	const jobs, workers, resources = 100, 10, 20
	e := k.env(t)
	pool := testkit.PoolAt(t, k.url+"&pool_max_conns=16")
	ids := make([]string, jobs)
	keys := make([]string, jobs)
	queue := make(chan *asynq.Task, jobs)
	for i := range jobs {
		var task *asynq.Task
		ids[i], task = e.submitJob(t, "acme", fmt.Sprintf("load-%03d", i), job.StatusQueued)
		keys[i] = fmt.Sprintf("effect:load-%03d", i)
		queue <- task
	}
	close(queue)
	account := func(o order) string {
		n, _ := strconv.Atoi(o.OrderID[len("load-"):])
		return fmt.Sprintf("account:%d", n%resources)
	}
	var (
		mu   sync.Mutex
		seen []drawn
	)
	h := HandleTx(k.deps(e, pool), kind, orderKey, account, func(ctx context.Context, tx pgx.Tx, j Job[order]) (string, error) {
		mu.Lock()
		seen = append(seen, drawn{j.Resource, j.Token, j.Key})
		mu.Unlock()
		if err := insertEffect(ctx, tx, j, "A"); err != nil {
			return "", err
		}
		return fmt.Sprintf("effect-%d", j.Token), nil
	})

	// The kills come when a quarter, then three fifths, of the jobs are
	// done.
	killAt := map[int64]chan struct{}{jobs / 4: make(chan struct{}), jobs * 3 / 5: make(chan struct{})}
	var done, failed atomic.Int64
	archived := make(chan error, jobs)
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	for range workers {
		wg.Go(func() {
			for task := range queue {
				for ctx.Err() == nil {
					err := h.ProcessTask(ctx, task)
					if err == nil {
						if ch, ok := killAt[done.Add(1)]; ok {
							close(ch)
						}
						break
					}
					if errors.Is(err, asynq.SkipRetry) {
						archived <- err
						break
					}
					failed.Add(1)
					select { // asynq's retry delay, shortened
					case <-ctx.Done():
					case <-time.After(10 * time.Millisecond):
					}
				}
			}
		})
	}
	for _, at := range []int64{jobs / 4, jobs * 3 / 5} {
		select {
		case <-killAt[at]:
		case err := <-archived:
			t.Fatalf("a delivery archived its task: %v", err)
		case <-time.After(60 * time.Second):
			t.Fatalf("%d jobs not done within a minute", at)
		}
		if err := k.kill(t); err != nil {
			t.FailNow()
		}
		if n := done.Load(); n >= jobs {
			t.Fatalf("every job was done before the kill at %d: the kill proves nothing", at)
		}
		k.restart(t)
	}
	testkit.Eventually(t, "every job done", 120*time.Second, func() bool {
		return done.Load() == jobs || len(archived) > 0
	})
	cancel()
	wg.Wait()
	if len(archived) > 0 {
		t.Fatalf("a delivery archived its task: %v", <-archived)
	}

	var statuses []string
	if err := e.pool.QueryRow(t.Context(), `SELECT array_agg(DISTINCT status) FROM jobs WHERE id = ANY($1)`, ids).Scan(&statuses); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(statuses, []string{string(job.StatusSucceeded)}) {
		t.Fatalf("the jobs' statuses = %q, want all succeeded", statuses)
	}
	rows, err := e.pool.Query(t.Context(), `
SELECT x.key, count(f.id), coalesce(min(f.token), 0), x.fencing_token, x.status
  FROM job_executions x LEFT JOIN effects f ON f.job_key = x.key
 WHERE x.key = ANY($1) GROUP BY x.key, x.fencing_token, x.status`, keys)
	if err != nil {
		t.Fatal(err)
	}
	type executed struct {
		Key         string
		Effects     int
		EffectToken int64
		Token       int64
		Status      string
	}
	results, err := pgx.CollectRows(rows, pgx.RowToStructByPos[executed])
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != jobs {
		t.Fatalf("%d jobs have an execution, want %d", len(results), jobs)
	}
	for _, r := range results {
		if r.Effects != 1 || r.Status != string(job.StatusSucceeded) || r.EffectToken != r.Token {
			t.Errorf("%s: %d effects, the first under token %d; execution %s under %d: want one effect, succeeded under its token",
				r.Key, r.Effects, r.EffectToken, r.Status, r.Token)
		}
	}

	// Tokens: the functions', then the ledger's, one attempt each.
	owner := map[[2]string]string{} // resource and token → the job given it
	last := map[string]int64{}      // a resource's latest token seen
	tokenOf := func(resource string, token int64) [2]string {
		return [2]string{resource, strconv.FormatInt(token, 10)}
	}
	for _, d := range seen {
		if k, ok := owner[tokenOf(d.Resource, d.Token)]; ok {
			t.Fatalf("token %d of %s was handed to two attempts (of %s and %s)", d.Token, d.Resource, k, d.Key)
		}
		owner[tokenOf(d.Resource, d.Token)] = d.Key
		if d.Token <= last[d.Resource] {
			t.Fatalf("token %d of %s came after %d", d.Token, d.Resource, last[d.Resource])
		}
		last[d.Resource] = d.Token
	}
	inLedger := map[[2]string]bool{}
	for _, a := range e.ledger(t, keys...) {
		id := tokenOf(a.Resource, a.Token)
		if inLedger[id] {
			t.Fatalf("token %d of %s is in the ledger twice", a.Token, a.Resource)
		}
		inLedger[id] = true
		if k, ok := owner[id]; ok && k != a.Key {
			t.Fatalf("token %d of %s: the ledger gives it to %s, the function saw it for %s", a.Token, a.Resource, a.Key, k)
		}
		if a.Outcome == "open" {
			t.Errorf("the attempt of %s under token %d is still open, after its job succeeded", a.Key, a.Token)
		}
	}
	lostTakes := 0
	for id := range owner {
		if !inLedger[id] {
			lostTakes++
		}
	}
	t.Logf("%d jobs, %d attempts given a token, %d failed deliveries, %d takes lost in the kills", jobs, len(seen), failed.Load(), lostTakes)
}
