package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/middleware/idempotency/pgstore"
	"github.com/idemgate/idemgate/middleware/idempotency/redisstore"
)

// scaleSchema is the growth bench's own schema, apart from the other
// scenarios' (benchSchema): it fills millions of rows and drops the
// schema at the end.
const scaleSchema = "idembench_scale"

// The scope every bench request has: the bench tenant on the payments
// route of the generated configuration.
const (
	scaleTenant = "bench"
	scaleRoute  = "payments"
)

type scaleOptions struct {
	bench        benchOptions // the shared flags: duration, warm-up, CPUs, binary, services
	records      []int64
	stores       []string
	rounds       int
	expired      float64
	janInterval  time.Duration
	janBatch     int
	replayCache  bool
	chunk        int64
	redisHeadway float64 // share of MemAvailable a Redis fill may take
	jobs         jobsOptions
}

func parseScaleFlags(args []string, getenv func(string) string, stdout io.Writer) (*scaleOptions, error) {
	o := &scaleOptions{}
	b := &o.bench
	fs := flag.NewFlagSet("scale", flag.ContinueOnError)
	fs.SetOutput(stdout)
	records := fs.String("records", "1m,10m", "store sizes to measure at, in records (k and m suffixes)")
	stores := fs.String("stores", "postgres,redis", "stores to fill: postgres, redis (the idempotency stores); jobs: the job tables under the retention janitor (the -jobs-* flags)")
	fs.DurationVar(&b.duration, "duration", 10*time.Second, "length of each measured run")
	fs.DurationVar(&b.warmup, "warmup", 2*time.Second, "unmeasured load on each server before its first run")
	fs.IntVar(&o.rounds, "rounds", 1, "baseline/idemgate pairs per scenario and size (the table shows the median ratio)")
	fs.IntVar(&b.concurrency, "c", 64, "concurrent connections (closed loop)")
	fs.Float64Var(&o.expired, "expired", 0.25, "PostgreSQL: share of the filled records already expired, over the past day (the janitor's backlog)")
	fs.DurationVar(&o.janInterval, "janitor-interval", time.Minute, "the janitor's pause between runs (janitor.interval)")
	fs.IntVar(&o.janBatch, "janitor-batch", 1000, "records the janitor deletes per statement (janitor.batch)")
	fs.BoolVar(&o.replayCache, "replay-cache", false, "leave idemgate's replay cache on (off by default, so that every replay reads the store)")
	fs.Int64Var(&o.chunk, "fill-chunk", 500_000, "PostgreSQL: records written per fill statement")
	fs.Float64Var(&o.redisHeadway, "redis-mem-share", 0.6, "a Redis fill is skipped when its estimated memory exceeds this share of MemAvailable")
	fs.DurationVar(&o.jobs.duration, "jobs-duration", 2*time.Minute, "jobs: length of the run")
	fs.Float64Var(&o.jobs.rate, "jobs-rate", 200, "jobs: final jobs written per second")
	fs.DurationVar(&o.jobs.retention, "jobs-retention", 30*time.Second, "jobs: jobs_retention and executions_retention")
	fs.DurationVar(&o.jobs.interval, "jobs-janitor-interval", 5*time.Second, "jobs: the janitor's pause between runs (janitor.interval); its batch is -janitor-batch")
	fs.DurationVar(&o.jobs.sample, "jobs-sample", 5*time.Second, "jobs: time between two samples of the tables' rows and sizes")
	fs.Float64Var(&o.jobs.sizeBound, "jobs-size-bound", 0.25, "jobs: largest growth of a table's size from the warm-up to the end still called flat (0.25: +25%)")
	fs.DurationVar(&o.jobs.vacuum, "jobs-vacuum", 20*time.Second, "jobs: when the server's autovacuum is off, VACUUM the tables this often in its place (0: never)")
	b.harnessFlags(fs, getenv, "bench/out/scale-TIMESTAMP", "; the bench uses a schema of its own, "+scaleSchema+", dropped at the end", "; it deletes only the keys it wrote")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	var errs []error
	for _, s := range splitList(*records) {
		n, err := parseCount(s)
		if err != nil || n < 1000 || n > 50_000_000 {
			errs = append(errs, fmt.Errorf("-records: %q: want 1k..50m", s))
			continue
		}
		o.records = append(o.records, n)
	}
	slices.Sort(o.records)
	o.stores = splitList(*stores)
	for _, s := range o.stores {
		if s != "redis" && s != "postgres" && s != "jobs" {
			errs = append(errs, fmt.Errorf("-stores: %q is not postgres, redis or jobs", s))
		}
	}
	o.jobs.batch = o.janBatch
	if slices.Contains(o.stores, "jobs") {
		errs = append(errs, o.jobs.validate())
	}
	if o.expired < 0 || o.expired > 0.9 {
		errs = append(errs, fmt.Errorf("-expired %v: want 0..0.9", o.expired))
	}
	errs = append(errs,
		outside("-rounds", o.rounds, 1, 10, "1..10"),
		outside("-duration", b.duration, time.Second, 2*time.Minute, "1s..2m"),
		outside("-c", b.concurrency, 1, 1024, "1..1024"))
	if o.janInterval <= 0 || o.janBatch <= 0 || o.chunk < 1000 {
		errs = append(errs, errors.New("-janitor-interval, -janitor-batch and -fill-chunk (>= 1000) must be positive"))
	}
	return o, errors.Join(errs...)
}

// parseCount reads 100k, 1m, 2.5m or 12345.
func parseCount(s string) (int64, error) {
	mult := 1.0
	switch {
	case strings.HasSuffix(strings.ToLower(s), "k"):
		mult, s = 1e3, s[:len(s)-1]
	case strings.HasSuffix(strings.ToLower(s), "m"):
		mult, s = 1e6, s[:len(s)-1]
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 0 {
		return 0, fmt.Errorf("%q is not a count", s)
	}
	return int64(f*mult + 0.5), nil
}

// fmtCount writes n as the flags read it: 100k, 1m, 2.5m.
func fmtCount(n int64) string {
	switch {
	case n >= 1e6 && n%100_000 == 0:
		return strconv.FormatFloat(float64(n)/1e6, 'f', -1, 64) + "m"
	case n >= 1e3 && n%100 == 0:
		return strconv.FormatFloat(float64(n)/1e3, 'f', -1, 64) + "k"
	}
	return strconv.FormatInt(n, 10)
}

// scaleServices are the growth bench's Redis database and PostgreSQL
// schema (services.dbURL's search_path is scaleSchema).
type scaleServices struct {
	services
	admin *pgxpool.Pool // the URL as given, for the schema itself
}

func openScaleServices(ctx context.Context, o *scaleOptions) (*scaleServices, error) {
	s := &scaleServices{}
	b := &o.bench
	var err error
	if slices.Contains(o.stores, "redis") {
		// A fill's pipelines are long: a minute to answer.
		if s.redisURL, s.rdb, err = benchRedis(ctx, b.redisURL, b.redisDB, time.Minute); err != nil {
			return nil, err
		}
	}
	if slices.Contains(o.stores, "postgres") {
		// A schema left by an interrupted run is this bench's own.
		if s.admin, err = s.openSchema(ctx, b.dbURL, scaleSchema, "DROP SCHEMA IF EXISTS "+scaleSchema+" CASCADE; CREATE SCHEMA "+scaleSchema); err != nil {
			s.close()
			return nil, err
		}
	}
	return s, nil
}

func (s *scaleServices) close() {
	s.services.close()
	if s.admin != nil {
		s.admin.Close()
	}
}

// dropSchema removes everything the bench wrote to PostgreSQL.
func (s *scaleServices) dropSchema(ctx context.Context) error {
	if s.admin == nil {
		return nil
	}
	_, err := s.admin.Exec(ctx, "DROP SCHEMA IF EXISTS "+scaleSchema+" CASCADE")
	return err
}

// scaleRun is one `idembench scale`.
type scaleRun struct {
	o      *scaleOptions
	svc    *scaleServices
	up     *upstream
	upURL  string
	base   *target
	log    io.Writer
	prefix string // every Idempotency-Key the run sends starts with it
	rep    *scaleReport
}

// runScale is `idembench scale`.
func runScale(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	o, err := parseScaleFlags(args, getenv, stdout)
	if err != nil {
		return err
	}
	if err := pinSelf(&o.bench, stderr); err != nil {
		return err
	}
	b := &o.bench
	if jobsOnly(o.stores) {
		b.bin = "" // neither idemgate nor the baseline runs
	}
	if err := b.prepare("scale"); err != nil {
		return err
	}
	var tag [4]byte
	_, _ = rand.Read(tag[:])
	r := &scaleRun{o: o, prefix: "scale-" + hex.EncodeToString(tag[:]) + "-", rep: &scaleReport{runInfo: newRunInfo("scale", args, map[string]any{
		"duration": b.duration.String(), "rounds": o.rounds, "concurrency": b.concurrency, "warmup": b.warmup.String(),
		"server_cpu": b.serverCPU, "load_cpu": b.loadCPU, "expired_share": o.expired, "replay_cache": o.replayCache,
		"janitor_interval": o.janInterval.String(), "janitor_batch": o.janBatch, "stores": o.stores,
	})}}
	r.log = io.MultiWriter(stdout, mustCreate(filepath.Join(b.dir, "progress.log")))
	fmt.Fprintf(r.log, "idembench scale: %s; results in %s\n", r.rep.Machine.String(), b.dir)
	if b.serverCPU >= 0 && !jobsOnly(o.stores) {
		fmt.Fprintf(r.log, "idembench scale: servers pinned to CPU %d, load generator and upstream to CPU %d, Redis and PostgreSQL unpinned\n", b.serverCPU, b.loadCPU)
	}
	if r.svc, err = openScaleServices(ctx, o); err != nil {
		return err
	}
	defer r.svc.close()
	defer func() {
		// Clean up whatever happened, even after an interrupt.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
		defer cancel()
		if err := r.svc.dropSchema(cctx); err != nil {
			fmt.Fprintf(r.log, "idembench scale: dropping schema %s: %v\n", scaleSchema, err)
		}
		if r.svc.rdb != nil {
			n, err := deleteRedisRun(cctx, r.svc.rdb, redisstore.DefaultPrefix, r.prefix)
			if err != nil {
				fmt.Fprintf(r.log, "idembench scale: deleting Redis keys: %v\n", err)
			} else if n > 0 {
				fmt.Fprintf(r.log, "idembench scale: deleted %d more Redis keys of this run\n", n)
			}
		}
	}()

	if !jobsOnly(o.stores) {
		r.up = newUpstream(2 * time.Minute)
		upAddr, stopUp, err := serveUpstream(r.up)
		if err != nil {
			return err
		}
		defer stopUp()
		r.upURL = "http://" + upAddr
		if r.base, err = startBaseline(ctx, b, r.upURL); err != nil {
			return err
		}
		defer r.base.proc.Stop(syscall.SIGTERM, stopGrace)
		if err := warm(ctx, r.base, b); err != nil {
			return err
		}
	}
	for _, store := range o.stores {
		if ctx.Err() != nil {
			break
		}
		if store == "jobs" {
			if err := r.jobs(ctx); err != nil {
				r.rep.Problems = append(r.rep.Problems, "jobs: "+err.Error())
				fmt.Fprintf(r.log, "idembench scale: jobs: %v\n", err)
			}
			continue
		}
		if err := r.store(ctx, store); err != nil {
			r.rep.Problems = append(r.rep.Problems, fmt.Sprintf("store %s: %v", store, err))
			fmt.Fprintf(r.log, "idembench scale: store %s: %v\n", store, err)
			if ctx.Err() != nil {
				// Interrupted: keep what was measured so far.
				break
			}
		}
	}
	r.rep.Seconds = time.Since(r.rep.Started).Seconds()
	if err := writeScaleReport(r.rep, b.dir, stdout); err != nil {
		return err
	}
	if len(r.rep.Problems) > 0 {
		return fmt.Errorf("%d problems (see above)", len(r.rep.Problems))
	}
	return nil
}

// scaleCandidate starts idemgate on store with the bench's configuration,
// the replay cache off unless asked for, and its own janitor parked: it
// runs once at start-up, on the empty store, then not for a day. The
// bench runs the store's janitor itself when it measures it.
func (r *scaleRun) scaleCandidate(ctx context.Context, store string) (*target, error) {
	b := &r.o.bench
	c, err := startCandidate(ctx, candidateOptions{
		bin: b.bin, store: store, upstream: r.upURL, dir: b.dir, files: "idemgate-scale-" + store, cpu: b.serverCPU,
		logLevel: b.logLevel, svc: &r.svc.services,
		extra: fmt.Sprintf("replay_cache: {off: %t}\njanitor: {interval: 24h, batch: %d}\n", !r.o.replayCache, r.o.janBatch),
	})
	if err != nil {
		return nil, err
	}
	return &target{name: "idemgate-" + store, proc: c.proc, base: "http://" + c.addr, client: loadClient(b.concurrency)}, nil
}

// template is the record a real request leaves: every filled record
// copies its fingerprint and stored response.
func (r *scaleRun) template(ctx context.Context, store string, cand *target) (fillSpec, error) {
	key := r.prefix + "template-" + store
	if code, err := post(ctx, cand.client, cand.base+"/v1/payments", key); err != nil || code != http.StatusCreated {
		return fillSpec{}, fmt.Errorf("template request: %d, %v", code, err)
	}
	var st idempotency.Store
	switch store {
	case "postgres":
		s := pgstore.New(r.svc.pool, pgstore.WithLogger(nil))
		defer s.Close()
		st = s
	case "redis":
		s := redisstore.New(r.svc.rdb)
		defer func() { _ = s.Close() }()
		st = s
	}
	rec, err := st.Get(ctx, idempotency.Scope{Tenant: scaleTenant, Route: scaleRoute, Key: key})
	if err != nil {
		return fillSpec{}, fmt.Errorf("template record: %w", err)
	}
	if rec.State != idempotency.StateCompleted || rec.Response == nil {
		return fillSpec{}, fmt.Errorf("template record is %s, not completed", rec.State)
	}
	return fillSpec{
		Tenant: scaleTenant, Route: scaleRoute, Retention: 24 * time.Hour,
		Fingerprint: rec.Fingerprint, Status: rec.Response.Status, Header: rec.Response.Header, Body: rec.Response.Body,
	}, nil
}

// store measures one store at every size.
func (r *scaleRun) store(ctx context.Context, store string) error {
	cand, err := r.scaleCandidate(ctx, store)
	if err != nil {
		return err
	}
	defer cand.proc.Stop(syscall.SIGTERM, stopGrace)
	b := &r.o.bench
	if _, err := attack(ctx, cand.client, loadSpec{name: "warmup", target: cand.base + "/v1/payments", key: uniqueKeys(r.prefix + "warm-" + store), concurrency: b.concurrency, duration: b.warmup}); err != nil {
		return err
	}
	tmpl, err := r.template(ctx, store, cand)
	if err != nil {
		return err
	}
	var prev *fillSpec
	for _, n := range r.o.records {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := r.empty(ctx, store, prev); err != nil {
			return err
		}
		f := tmpl
		f.KeyPrefix = r.prefix + fmtCount(n) + "-"
		f.Records, f.Now = n, time.Now()
		if store == "postgres" {
			f.Expired = int64(float64(n) * r.o.expired)
		}
		pt := scalePoint{Store: store, Records: n, Expired: f.Expired, Scenarios: map[string][]pairRecord{}}
		if err := r.roomFor(ctx, store, n); err != nil {
			r.rep.Problems = append(r.rep.Problems, fmt.Sprintf("%s at %s records: skipped: %v", store, fmtCount(n), err))
			fmt.Fprintf(r.log, "%s, %s records: skipped: %v\n", store, fmtCount(n), err)
			continue
		}
		prev = &f
		err := r.point(ctx, store, cand, f, &pt)
		r.rep.Points = append(r.rep.Points, pt)
		if err != nil {
			return fmt.Errorf("%s records: %w", fmtCount(n), err)
		}
	}
	return r.empty(ctx, store, prev)
}

// empty deletes what the previous size wrote, so that each size starts
// from an empty store.
func (r *scaleRun) empty(ctx context.Context, store string, prev *fillSpec) error {
	switch store {
	case "postgres":
		_, err := r.svc.pool.Exec(ctx, "TRUNCATE idempotency_records, idempotency_claims")
		return err
	case "redis":
		if prev != nil {
			if err := unfillRedis(ctx, r.svc.rdb, redisstore.DefaultPrefix, *prev); err != nil {
				return err
			}
		}
		_, err := deleteRedisRun(ctx, r.svc.rdb, redisstore.DefaultPrefix, r.prefix)
		return err
	}
	return nil
}

// roomFor refuses a fill that would not fit: PostgreSQL's data directory
// needs room for the rows, their indexes and the WAL they write; Redis
// needs memory.
func (r *scaleRun) roomFor(ctx context.Context, store string, n int64) error {
	switch store {
	case "postgres":
		// About 1 KiB of table, ledger and indexes per record, as much
		// again of WAL until the next checkpoints recycle it, and room to spare.
		need := uint64(n) * 3 << 10
		dir := "/"
		_ = r.svc.pool.QueryRow(ctx, "SHOW data_directory").Scan(&dir)
		var st syscall.Statfs_t
		if err := syscall.Statfs(dir, &st); err != nil {
			_ = syscall.Statfs("/", &st)
		}
		if free := st.Bavail * uint64(st.Bsize); free < need+(5<<30) {
			return fmt.Errorf("%d GiB free on the disk of %s, want %d GiB", free>>30, dir, (need+(5<<30))>>30)
		}
	case "redis":
		per := r.rep.redisPerRecord()
		if per == 0 {
			per = 1200 // a hash of 13 fields, its body past the listpack limit
		}
		need := uint64(float64(n) * per * 1.2)
		if avail := memAvailable(); avail > 0 && float64(need) > r.o.redisHeadway*float64(avail) {
			return fmt.Errorf("about %d MiB of Redis memory needed, %d MiB available (-redis-mem-share %.2f)", need>>20, avail>>20, r.o.redisHeadway)
		}
		var maxmem uint64
		if v, err := r.svc.rdb.ConfigGet(ctx, "maxmemory").Result(); err == nil {
			maxmem, _ = strconv.ParseUint(v["maxmemory"], 10, 64)
		}
		if maxmem > 0 && need+r.redisUsed(ctx) > maxmem {
			return fmt.Errorf("the Redis maxmemory of %d MiB would be exceeded", maxmem>>20)
		}
	}
	return nil
}

func memAvailable() uint64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "MemAvailable:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

func (r *scaleRun) redisUsed(ctx context.Context) uint64 {
	info, err := r.svc.rdb.Info(ctx, "memory").Result()
	if err != nil {
		return 0
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			n, _ := strconv.ParseUint(v, 10, 64)
			return n
		}
	}
	return 0
}
