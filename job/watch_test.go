package job_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/internal/testkit/topology"
	"github.com/idemgate/idemgate/job"
)

// watchEnv is a jobs table and a running Watcher on it.
type watchEnv struct {
	pool    *pgxpool.Pool
	records *job.Store
	w       *job.Watcher
	// pid is the server process of the listener's current connection.
	pid atomic.Uint32
}

// startWatcher runs a Watcher on a schema of the test's own; listen gives
// it a listener (a connection of its own, as database_direct_url), else
// it polls every poll.
func startWatcher(t *testing.T, listen bool, poll time.Duration) *watchEnv {
	t.Helper()
	dbURL := testkit.Postgres(t)
	pool := testkit.PoolAt(t, dbURL)
	v := &watchEnv{pool: pool, records: job.NewStore(pool)}
	opts := job.WatcherOptions{Poll: poll, Logger: testkit.Logger()}
	if listen {
		cc, err := pgx.ParseConfig(dbURL)
		if err != nil {
			t.Fatal(err)
		}
		opts.Connect = func(ctx context.Context) (*pgx.Conn, error) {
			conn, err := pgx.ConnectConfig(ctx, cc)
			if err == nil {
				v.pid.Store(conn.PgConn().PID())
			}
			return conn, err
		}
	}
	v.w = job.NewWatcher(pool, opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = v.w.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	if listen {
		v.awaitListening(t, true)
	}
	return v
}

func (v *watchEnv) awaitListening(t *testing.T, want bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for v.w.Listening() != want {
		if time.Now().After(deadline) {
			t.Fatalf("watcher listening = %v after 20s, want %v", !want, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// insert records a queued job and returns its id.
func (v *watchEnv) insert(t *testing.T, key string) string {
	t.Helper()
	id := job.ID("acme", "invoices", key)
	_, err := v.pool.Exec(t.Context(), `INSERT INTO jobs (id, tenant, route, idempotency_key, task, queue, business_key, payload)
VALUES ($1, 'acme', 'invoices', $2, 'invoice.create', 'default', 'invoice:'||$2, '{}')`, id, key)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// await returns the first document the watch receives whose status is
// want, failing the test after within.
func await(t *testing.T, x *job.Watch, want job.Status, within time.Duration) job.Row {
	t.Helper()
	timer := time.NewTimer(within)
	defer timer.Stop()
	for {
		select {
		case <-x.Changed():
			if r, ok := x.Latest(); ok && r.Status == want {
				return r
			}
		case <-timer.C:
			r, _ := x.Latest()
			t.Fatalf("no %s document within %s; last seen %q", want, within, r.Status)
		}
	}
}

func TestWatcherWakesOnChange(t *testing.T) {
	for _, tc := range []struct {
		name   string
		listen bool
		within time.Duration
	}{
		// Notified: the change is read at once, whatever the poll.
		{"listener", true, 5 * time.Second},
		// Polled: within a poll or two.
		{"polling", false, 5 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			poll := time.Hour // a listener never needs it
			if !tc.listen {
				poll = 200 * time.Millisecond
			}
			v := startWatcher(t, tc.listen, poll)
			id := v.insert(t, "k1")
			x := v.w.Watch(t.Context(), id)
			defer x.Stop()
			if err := v.records.SetStatus(t.Context(), id, job.StatusProcessing, 1, "", ""); err != nil {
				t.Fatal(err)
			}
			await(t, x, job.StatusProcessing, tc.within)
			if err := v.records.SetStatus(t.Context(), id, job.StatusSucceeded, 1, "inv-1", ""); err != nil {
				t.Fatal(err)
			}
			r := await(t, x, job.StatusSucceeded, tc.within)
			if r.ResultRef == nil || *r.ResultRef != "inv-1" || r.FinishedAt == nil {
				t.Fatalf("final document %+v", r)
			}
		})
	}
}

// A thousand watches of one job cost one read per change, not one each
// (and none to start), and every watch sees the change.
func TestWatcherReadsOncePerChangeForAllWatches(t *testing.T) {
	v := startWatcher(t, true, time.Hour)
	id := v.insert(t, "k1")
	other := v.insert(t, "k2")
	const n = 1000
	watches := make([]*job.Watch, n)
	for i := range watches {
		watches[i] = v.w.Watch(t.Context(), id)
	}
	for _, x := range watches {
		defer x.Stop()
	}
	before := v.w.Reads()
	for range 3 {
		// An unwatched change costs nothing; a watched one is read once.
		if err := v.records.SetStatus(t.Context(), other, job.StatusProcessing, 1, "", ""); err != nil {
			t.Fatal(err)
		}
	}
	if err := v.records.SetStatus(t.Context(), id, job.StatusSucceeded, 1, "inv-1", ""); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for _, x := range watches {
		wg.Go(func() { await(t, x, job.StatusSucceeded, 10*time.Second) })
	}
	wg.Wait()
	// One read for the watched change; the changes of the job nobody
	// watches cost none.
	if reads := v.w.Reads() - before; reads != 1 {
		t.Fatalf("%d watches of one job, one change of it and three of another: %d reads, want 1", n, reads)
	}
	if before != 0 {
		t.Errorf("%d reads before any change, want none", before)
	}
	t.Logf("%d watches of one job, one change of it and three of another: %d reads", n, v.w.Reads()-before)
}

// A listener whose connection is killed connects again; the change made
// meanwhile is found by polling, and later changes are notified again.
func TestWatcherRecoversFromAKilledListener(t *testing.T) {
	v := startWatcher(t, true, 200*time.Millisecond)
	id := v.insert(t, "k1")
	x := v.w.Watch(t.Context(), id)
	defer x.Stop()

	killed := v.pid.Load()
	var ok bool
	if err := v.pool.QueryRow(t.Context(), `SELECT pg_terminate_backend($1)`, killed).Scan(&ok); err != nil || !ok {
		t.Fatalf("pg_terminate_backend(%d) = %v, %v", killed, ok, err)
	}
	if err := v.records.SetStatus(t.Context(), id, job.StatusProcessing, 1, "", ""); err != nil {
		t.Fatal(err)
	}
	await(t, x, job.StatusProcessing, 10*time.Second)

	deadline := time.Now().Add(20 * time.Second)
	for v.pid.Load() == killed || !v.w.Listening() {
		if time.Now().After(deadline) {
			t.Fatal("the listener did not connect again within 20s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := v.records.SetStatus(t.Context(), id, job.StatusSucceeded, 1, "inv-1", ""); err != nil {
		t.Fatal(err)
	}
	await(t, x, job.StatusSucceeded, 10*time.Second)
}

// A scheduled job becomes queued at its time without a write, so without
// a notification: the watcher reads it again then.
func TestWatcherReadsAScheduledJobAtItsTime(t *testing.T) {
	v := startWatcher(t, true, time.Hour)
	id := v.insert(t, "k1")
	if _, err := v.pool.Exec(t.Context(), `UPDATE jobs SET status = 'scheduled', not_before = now() + interval '1 second' WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	x := v.w.Watch(t.Context(), id)
	defer x.Stop()
	r, err := v.records.ByID(t.Context(), id)
	if err != nil || r.Status != job.StatusScheduled {
		t.Fatalf("read %+v, %v; want scheduled", r, err)
	}
	x.Seen(r)
	r = await(t, x, job.StatusQueued, 10*time.Second)
	if r.NotBefore == nil || time.Until(*r.NotBefore) > 0 {
		t.Fatalf("queued before its time: not_before %v", r.NotBefore)
	}
}

// Without a listener, every watched job is read in one query per poll.
func TestWatcherPollsEveryJobInOneQuery(t *testing.T) {
	v := startWatcher(t, false, 100*time.Millisecond)
	var watches []*job.Watch
	for i := range 50 {
		x := v.w.Watch(t.Context(), v.insert(t, fmt.Sprintf("k%d", i)))
		defer x.Stop()
		watches = append(watches, x)
	}
	for _, x := range watches {
		await(t, x, job.StatusQueued, 5*time.Second)
	}
	start, before := time.Now(), v.w.Reads()
	time.Sleep(time.Second)
	polls := float64(time.Since(start)) / float64(100*time.Millisecond)
	// One read per poll for all 50, never 50 per poll.
	if reads := v.w.Reads() - before; float64(reads) > polls+2 {
		t.Fatalf("%d reads in %.0f polls of 50 watched jobs, want at most one per poll", reads, polls)
	}
}

// Through a transaction pooler the listener's LISTEN stays on a server
// connection it no longer holds: the watcher finds that notifications do
// not reach it, stops listening for good, and finds changes by polling.
func TestWatcherThroughATransactionPoolerPolls(t *testing.T) {
	direct := testkit.Database(t)
	bouncer := topology.StartPgBouncer(t)
	u, err := url.Parse(bouncer.URL(direct))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("default_query_exec_mode", "exec") // as a pooled database_url must
	u.RawQuery = q.Encode()
	pooled := u.String()
	pool := testkit.PoolAt(t, pooled)
	v := &watchEnv{pool: pool, records: job.NewStore(pool)}
	var connects atomic.Int32
	v.w = job.NewWatcher(pool, job.WatcherOptions{Poll: 200 * time.Millisecond, Logger: testkit.Logger(),
		Connect: func(ctx context.Context) (*pgx.Conn, error) {
			connects.Add(1)
			cc, err := pgx.ParseConfig(pooled)
			if err != nil {
				return nil, err
			}
			return pgx.ConnectConfig(ctx, cc)
		}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = v.w.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	id := v.insert(t, "k1")
	x := v.w.Watch(t.Context(), id)
	defer x.Stop()
	if err := v.records.SetStatus(t.Context(), id, job.StatusSucceeded, 1, "inv-1", ""); err != nil {
		t.Fatal(err)
	}
	await(t, x, job.StatusSucceeded, 10*time.Second)
	// The probe takes a few seconds to give up; then the listener is not
	// tried again.
	deadline := time.Now().Add(20 * time.Second)
	for connects.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(6 * time.Second) // past the probe's 5s: a window for a wrong retry to show
	if v.w.Listening() || connects.Load() != 1 {
		t.Fatalf("through a transaction pooler: listening %v after %d connections, want polling after one", v.w.Listening(), connects.Load())
	}
}

// Only a watched job's changes are announced: an announcement serialises
// the commits of every announcing transaction, so the jobs nobody waits
// for make none. A listener of the channel hears, in commit order, the
// change of the watched job and a marker sent after the unwatched job's
// change, and nothing for the unwatched one.
func TestOnlyWatchedJobsNotify(t *testing.T) {
	t.Parallel()
	v := startWatcher(t, true, time.Hour)
	quiet, watched := v.insert(t, "quiet"), v.insert(t, "watched")
	x := v.w.Watch(t.Context(), watched)
	defer x.Stop()

	cc, err := pgx.ParseConfig(v.pool.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.ConnectConfig(t.Context(), cc)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(t.Context(), "LISTEN "+job.Channel); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{quiet, watched} {
		if err := v.records.SetStatus(t.Context(), id, job.StatusProcessing, 1, "", ""); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := v.pool.Exec(t.Context(), `SELECT pg_notify($1, 'marker')`, job.Channel); err != nil {
		t.Fatal(err)
	}
	var heard []string
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second) // stops a broken test
	defer cancel()
	for len(heard) == 0 || heard[len(heard)-1] != "marker" {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			t.Fatalf("after %q: %v", heard, err)
		}
		heard = append(heard, n.Payload)
	}
	if want := []string{watched, "marker"}; fmt.Sprint(heard) != fmt.Sprint(want) {
		t.Fatalf("heard %q, want %q: only the watched job announces its change", heard, want)
	}
	await(t, x, job.StatusProcessing, 20*time.Second)
}

// flagFails is a database on which the watched flag cannot be written.
type flagFails struct{ *pgxpool.Pool }

func (f flagFails) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if strings.Contains(sql, "watched = true") {
		return pgconn.CommandTag{}, errors.New("connection refused (simulated)")
	}
	return f.Pool.Exec(ctx, sql, args...)
}

// A job whose flag could not be written is not announced, so the watcher
// reads it each Poll, listener or not, and the wait still sees the
// change.
func TestUnflaggedWatchIsPolled(t *testing.T) {
	t.Parallel()
	dbURL := testkit.Postgres(t)
	pool := testkit.PoolAt(t, dbURL)
	cc, err := pgx.ParseConfig(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	w := job.NewWatcher(flagFails{pool}, job.WatcherOptions{Poll: 50 * time.Millisecond, Logger: testkit.Logger(),
		Connect: func(ctx context.Context) (*pgx.Conn, error) { return pgx.ConnectConfig(ctx, cc) }})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	v := &watchEnv{pool: pool, records: job.NewStore(pool), w: w}
	v.awaitListening(t, true)

	id := v.insert(t, "unflagged")
	x := w.Watch(t.Context(), id)
	defer x.Stop()
	var flagged bool
	if err := pool.QueryRow(t.Context(), `SELECT watched FROM jobs WHERE id = $1`, id).Scan(&flagged); err != nil || flagged {
		t.Fatalf("watched flag = %v (%v), want false: the write failed", flagged, err)
	}
	if err := v.records.SetStatus(t.Context(), id, job.StatusSucceeded, 1, "inv-1", ""); err != nil {
		t.Fatal(err)
	}
	await(t, x, job.StatusSucceeded, 20*time.Second)
}
