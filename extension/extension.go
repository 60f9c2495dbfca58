package extension

import (
	"context"
	"flag"
	"io/fs"
	"log/slog"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/reconcile"
	"github.com/idemgate/idemgate/workers"
)

// An Option adds to the command line.
type Option func(*Set)

// Set is everything the options add, in the order they were given. The
// command line reads it; Apply builds it.
type Set struct {
	Handlers    []Handlers
	Jobs        [][]byte
	Migrations  []Migrations
	Reconcilers []Reconciler
	Effects     []EffectsFunc
	Settings    []Setting
	DevServers  []DevServer
}

// Apply returns the Set that opts make.
func Apply(opts ...Option) Set {
	var s Set
	for _, o := range opts {
		if o != nil {
			o(&s)
		}
	}
	return s
}

// Tasks lists the tasks the Set's Go handlers run.
func (s Set) Tasks() []string {
	var out []string
	for _, h := range s.Handlers {
		out = append(out, h.Tasks...)
	}
	return out
}

// Worker is what a worker process gives the handlers it registers.
type Worker struct {
	// DB is the worker's PostgreSQL pool: the one that holds the fences a
	// handler checks, so that an effect and its fence check can share a
	// transaction.
	DB *pgxpool.Pool
	// Redis is the worker's Redis client for locks and the like (never
	// asynq's own connections).
	Redis redis.UniversalClient
	// HTTPClient calls other services, traced as the worker's own calls are.
	HTTPClient *http.Client
	// Metrics registers the program's own series on the worker's /metrics.
	Metrics prometheus.Registerer
	// Logger is the worker's logger.
	Logger *slog.Logger
}

// Handlers are Go handlers for declared jobs.
type Handlers struct {
	// Tasks names the tasks Register adds, so that `config check` knows
	// them without starting a worker.
	Tasks []string
	// Register adds the handlers to h (workers.Add). An error stops the
	// worker from starting, as a usage error (exit 2).
	Register func(h *workers.Handlers, w Worker) error
}

// WithHandlers adds Go handlers for the declared jobs named in tasks. A
// declared job runs by its HTTP delivery or by a Go handler of the binary;
// `config check`, `worker` and `dev` refuse one that has neither.
func WithHandlers(tasks []string, register func(h *workers.Handlers, w Worker) error) Option {
	return func(s *Set) { s.Handlers = append(s.Handlers, Handlers{Tasks: tasks, Register: register}) }
}

// WithJobs adds job declarations (a YAML document with a top-level jobs:
// list, in the configuration file's syntax) for the routes of a
// configuration that name a task without declaring it in its own jobs:.
// A task declared in the file wins.
func WithJobs(yamlDoc []byte) Option {
	return func(s *Set) { s.Jobs = append(s.Jobs, yamlDoc) }
}

// Migrations are a program's own numbered SQL migrations (goose files),
// kept in a version table of their own so that they never mix with
// idemgate's. `migrate up` applies them after idemgate's, `migrate down`
// rolls them back first, `migrate status` lists them after idemgate's.
type Migrations struct {
	// Name heads their lines in `migrate status` ("examples").
	Name string
	// Table is their goose version table ("idemgate_examples_version").
	Table string
	// FS holds the .sql files at its root.
	FS fs.FS
}

// WithMigrations adds migrations of the program's own tables.
func WithMigrations(m Migrations) Option {
	return func(s *Set) { s.Migrations = append(s.Migrations, m) }
}

// ReconcileOptions is what `idemgate reconcile` was asked for, beyond
// the run's own options (reconcile.Options: progress, the stuck-job
// report).
type ReconcileOptions struct {
	// Grace leaves effects younger than it out of checks that a job
	// still running could break for a moment (--grace).
	Grace time.Duration
}

// Reconciler adds checks of a program's own tables to `idemgate
// reconcile`, which runs them with idemgate's own (reconcile.StuckJobs)
// in one snapshot.
type Reconciler struct {
	// Flags adds the reconciler's own flags to `idemgate reconcile`.
	// Optional.
	Flags func(fs *flag.FlagSet)
	// Checks returns the checks to run, in order, once the flags are
	// parsed. A check named reconcile.CheckStuckJobs among them places
	// idemgate's own there; otherwise it runs last. An error is a usage
	// error (a bad flag value).
	Checks func(opts ReconcileOptions) ([]reconcile.Check, error)
}

// WithReconcile adds checks to `idemgate reconcile`.
func WithReconcile(r Reconciler) Option {
	return func(s *Set) { s.Reconcilers = append(s.Reconcilers, r) }
}

// Effect is one effect row a job of a business key wrote.
type Effect struct {
	Kind      string
	Ref       string
	WrittenAt time.Time
}

// EffectsFunc returns the effects of tenant's business key of task, oldest
// first, and whether it knows task's effects at all (false: the program
// keeps none for it).
type EffectsFunc func(ctx context.Context, db *pgxpool.Pool, task, tenant, businessKey string) ([]Effect, bool, error)

// WithEffects adds what `explain` (and the admin API's explain endpoints)
// show as a job's effects.
func WithEffects(f EffectsFunc) Option {
	return func(s *Set) { s.Effects = append(s.Effects, f) }
}

// Setting is a configuration key the program claims: idemgate's own
// binary refuses it, this one reads it.
type Setting struct {
	// Key is its dotted path ("worker.partner_url"); it must not be one of
	// idemgate's own keys.
	Key string
	// Set is given the value the file holds (after ${VAR} expansion), or
	// the default when the file has none, and returns what is wrong with
	// it ("" when nothing is). It runs each time a configuration is read.
	Set func(value string) (problem string)
	// Default is the value when the file has none.
	Default string
	// Listener, if set, says the value names a loopback address this
	// binary serves (dev mode), so the configuration check warns when a
	// listener of idemgate's own takes the same port.
	Listener func(value string) (addr string, ok bool)
}

// WithSetting claims a configuration key.
func WithSetting(s Setting) Option {
	return func(set *Set) { set.Settings = append(set.Settings, s) }
}

// DevServer is a server `idemgate dev` runs beside the gateway and the
// worker (a simulated partner, say).
type DevServer struct {
	Name string
	// Addr returns the address it listens on, read once the
	// configuration is loaded, or an error that stops dev mode as a usage
	// error.
	Addr    func() (string, error)
	Handler http.Handler
}

// WithDevServer adds a server to `idemgate dev`.
func WithDevServer(d DevServer) Option {
	return func(s *Set) { s.DevServers = append(s.DevServers, d) }
}
