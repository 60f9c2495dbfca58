package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgate/idemgate/internal/testkit/proc"
)

// Options configure a run of the suite.
type Options struct {
	// Idemgate is the idemgate binary the gateways and workers run.
	Idemgate string
	// Scenarios names the scenarios to run; empty runs them all.
	Scenarios []string
	// Keys per scenario. Default 300, or 100 when Short.
	Keys int
	// Short shortens what can be shortened: fewer keys over a shorter
	// load, and shorter deadlines for the clients.
	Short bool
	// Dir keeps the servers' data and every process's configuration and
	// log; empty: a temporary directory removed at the end.
	Dir string
	// Progress gets a line as each scenario starts and ends. Default
	// io.Discard.
	Progress io.Writer
}

// Run starts a private Redis and PostgreSQL, runs each scenario against
// fresh gateways and workers, stops everything it started, and returns
// one row per scenario. An error means the suite itself could not run;
// a broken guarantee is in the report (Report.Failed).
func Run(ctx context.Context, o Options) (*Report, error) {
	picked, err := pick(o.Scenarios)
	if err != nil {
		return nil, err
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if o.Keys <= 0 {
		o.Keys = 300
		if o.Short {
			o.Keys = 100
		}
	}
	bin, err := filepath.Abs(o.Idemgate)
	if err != nil {
		return nil, err
	}
	if !isExec(bin) {
		return nil, fmt.Errorf("idemgate binary %s: not an executable file (make build, or -idemgate PATH)", o.Idemgate)
	}

	dir := o.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "idemchaos-"); err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	// The server's user (postgres, when the suite runs as root) must
	// reach its own directory inside.
	if err := os.Chmod(dir, 0o711); err != nil {
		return nil, err
	}

	var settings []setting
	for _, sc := range picked {
		settings = append(settings, sc.settings...)
	}
	keys, err := probeKeys(ctx, bin, dir, settings)
	if err != nil {
		return nil, err
	}
	redis, err := StartRedis(ctx, filepath.Join(dir, "redis"), false)
	if err != nil {
		return nil, err
	}
	defer redis.Close()
	pg, err := StartPostgres(ctx, filepath.Join(dir, "postgres"))
	if err != nil {
		return nil, err
	}
	defer pg.Close()

	s := &suite{bin: bin, dir: dir, keys: keys, redis: redis, pg: pg, opts: o}
	rep := &Report{}
	for i, sc := range picked {
		if ctx.Err() != nil {
			break
		}
		fmt.Fprintf(o.Progress, "idemchaos: %s: %d keys\n", sc.name, o.Keys)
		start := time.Now()
		row := &Row{Scenario: sc.name, Broken: []string{}}
		if err := s.run(ctx, i, sc, row); err != nil {
			row.Error = err.Error()
		}
		row.Seconds = time.Since(start).Round(100 * time.Millisecond).Seconds()
		verdict := "ok"
		if row.Failed() {
			verdict = "failed"
		}
		fmt.Fprintf(o.Progress, "idemchaos: %s: %s in %.0fs\n", sc.name, verdict, row.Seconds)
		rep.Rows = append(rep.Rows, row)
	}
	return rep, ctx.Err()
}

// suite is what every scenario of a run shares.
type suite struct {
	bin   string
	dir   string
	keys  map[string]bool
	redis *Redis
	pg    *Postgres
	opts  Options
}

// run runs scenario number i and fills row.
func (s *suite) run(ctx context.Context, i int, sc scenario, row *Row) error {
	for _, st := range sc.settings {
		if !s.keys[st.key] {
			return fmt.Errorf("%s has no %s: the binary predates the option this scenario measures", s.bin, st.key)
		}
	}
	db := fmt.Sprintf("chaos_%d", i)
	dir := filepath.Join(s.dir, sc.name)
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return err
	}
	deploy := sc.deploy
	if deploy == nil {
		deploy = sharedServers
	}
	dep, err := deploy(ctx, s, dir, db)
	if err != nil {
		return fmt.Errorf("deployment: %w", err)
	}
	defer dep.close()
	latency := sc.upstreamLatency
	if latency == 0 {
		latency = 250 * time.Millisecond
	}
	up, err := StartUpstream(latency)
	if err != nil {
		return err
	}
	defer up.Close()

	store := sc.store
	if store == "" {
		store = "postgres"
	}
	scLease := sc.lease
	if scLease == 0 {
		scLease = lease
	}
	cl, err := newCluster(s.bin, dir, clusterConfig{
		Store: store, DatabaseURL: dep.databaseURL, RedisURL: dep.redisURL,
		UpstreamURL: up.URL(), Secret: newSecret(), Lease: scLease, DeliverTimeout: max(5*time.Second, 2*latency),
		keys: s.keys, Settings: sc.settings,
	}, sc.workers, dep.wire)
	if err != nil {
		return err
	}
	defer cl.close()
	if err := cl.migrate(ctx); err != nil {
		return err
	}
	if err := cl.startGateways(ctx); err != nil {
		return err
	}
	if !sc.faultAfterLoad {
		if err := cl.startWorkers(ctx); err != nil {
			return err
		}
	}

	l := load{
		gateways:       cl.urls,
		path:           upstreamPath,
		tenant:         tenant,
		body:           chargeJSON,
		spread:         sc.spread,
		attemptTimeout: 15 * time.Second,
		keyDeadline:    60 * time.Second,
	}
	if sc.jobs {
		l.path = jobsPath
	}
	faultAt := sc.faultAt
	if s.opts.Short {
		// The same faults over a shorter load: what is left of the spread
		// still covers each fault, and fewer keys come at a similar pace.
		l.spread = max(sc.spread-4*time.Second, sc.spread/2)
		faultAt = sc.faultAt / 2
		l.keyDeadline = 40 * time.Second
	}
	n := s.opts.Keys
	if sc.maxKeys > 0 {
		n = min(n, sc.maxKeys)
	}
	keys := make([]string, n)
	for k := range keys {
		keys[k] = fmt.Sprintf("%s-%04d", sc.name, k)
	}
	send := func(ctx context.Context) *loadResult { return runLoad(ctx, l, keys) }
	if sc.mixed {
		send = func(ctx context.Context) *loadResult { return runMixed(ctx, l, keys) }
	}

	e := &env{pg: s.pg, redis: s.redis, proxy: dep.proxy, cluster: cl, dep: dep}
	var (
		res        *loadResult
		faultStart time.Time
		faultErr   error
	)
	if sc.faultAfterLoad {
		res = send(ctx)
		faultStart = time.Now()
		faultErr = sc.fault(ctx, e)
		if faultErr == nil {
			faultErr = cl.startWorkers(ctx)
		}
	} else {
		done := make(chan *loadResult, 1)
		go func() { done <- send(ctx) }()
		if proc.Sleep(ctx, faultAt) {
			faultStart = time.Now()
			faultErr = sc.fault(ctx, e)
		}
		res = <-done
	}
	if faultErr != nil {
		faultErr = fmt.Errorf("fault: %w", faultErr)
	}

	var (
		succeeded map[string]bool
		finishErr error
	)
	if sc.jobs || sc.mixed {
		succeeded, finishErr = awaitFinished(ctx, dep.checkURL, acceptedJobs(res), sc.finishWithin)
	}
	applied := up.Applied()
	row.measure(res, applied, faultStart, succeeded)
	row.measureFailover(res, applied, faultStart, sc.jobs || sc.mixed)
	row.Broken = check(row)
	return errors.Join(faultErr, finishErr, cl.exited(), ctx.Err())
}

// awaitFinished waits up to d for the accepted jobs to succeed, reading the jobs
// table straight from PostgreSQL, and returns which did.
func awaitFinished(ctx context.Context, dbURL string, ids []string, d time.Duration) (map[string]bool, error) {
	succeeded := map[string]bool{}
	for _, id := range ids {
		succeeded[id] = false
	}
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return succeeded, err
	}
	defer pool.Close()
	deadline := time.Now().Add(d)
	for {
		rows, err := pool.Query(ctx, "SELECT id FROM jobs WHERE id = ANY($1) AND status = 'succeeded'", ids)
		if err == nil {
			for rows.Next() {
				var id string
				if rows.Scan(&id) == nil {
					succeeded[id] = true
				}
			}
			rows.Close()
			err = rows.Err()
		}
		done := 0
		for _, ok := range succeeded {
			if ok {
				done++
			}
		}
		if done == len(ids) {
			return succeeded, nil
		}
		if time.Now().After(deadline) {
			return succeeded, err
		}
		if !proc.Sleep(ctx, 500*time.Millisecond) {
			return succeeded, ctx.Err()
		}
	}
}

// chargeJSON is the proxied request of a key.
func chargeJSON(key string) []byte {
	return fmt.Appendf(nil, `{"ref":%q,"amount_cents":1250,"currency":"EUR"}`, key)
}
