package config

import (
	"strings"
	"time"

	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/middleware/auth"
	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/problem"
	"github.com/idemgate/idemgate/workers"
)

// Config is the whole configuration of idemgate: the gateway (serve), the
// worker and dev mode read the same file. The yaml tags are the public key
// names. Every field documents its default; a zero value means that default
// unless the field says otherwise. Where a library owns settings, the file
// decodes into the library's own Config (idempotency.Config,
// workers.Config), whose fields carry their defaults and rules.
type Config struct {
	// Listen is the address of the public API. Default ":8080".
	Listen string `yaml:"listen"`
	// AdminListen serves /metrics and /admin/... Default "127.0.0.1:9090"
	// when the key is absent; admin_listen: "" turns the admin listener off.
	AdminListen string `yaml:"admin_listen"`
	// AdminTokenSHA256 is the hex SHA-256 of the admin bearer token (64 hex
	// digits, stored lower case). Required unless AdminListen is "".
	AdminTokenSHA256 string `yaml:"admin_token_sha256"`
	// TLS, when set, serves the public listener over HTTPS (and HTTP/2)
	// with this certificate, re-read when its files change and on SIGHUP.
	// Default none: plain HTTP.
	TLS *TLSFiles `yaml:"tls"`
	// AdminTLS is TLS for the admin listener. Default none.
	AdminTLS *TLSFiles `yaml:"admin_tls"`
	// Admin configures what the admin listener serves beyond the admin API.
	Admin Admin `yaml:"admin"`
	// ProblemBase prefixes every problem+json type. An absolute URL ending
	// in "/". Default problem.DefaultBase,
	// "https://idemgate.dev/problems/".
	ProblemBase string `yaml:"problem_base"`
	// Store holds idempotency records: "postgres" (default), "redis" or
	// "memory".
	Store string `yaml:"store"`
	// DatabaseURL is the PostgreSQL connection string (postgres:// URL or
	// key=value). Required with store postgres. Env DATABASE_URL, when set,
	// replaces it.
	DatabaseURL string `yaml:"database_url"`
	// DatabaseDirectURL is a direct connection to the same database, for
	// what needs a session of its own: the listeners that wake duplicates
	// waiting for a request in flight and the waits on jobs (LISTEN), and
	// `idemgate migrate`.
	// Set it when database_url goes through a transaction pooler
	// (PgBouncer with pool_mode = transaction). Default database_url.
	// Env DATABASE_DIRECT_URL, when set, replaces it.
	DatabaseDirectURL string `yaml:"database_direct_url"`
	// RedisURL is redis://…, rediss://…, the same with master_name=NAME
	// for Redis Sentinel (the hosts are then sentinels:
	// redis://s1:26379/0?master_name=NAME&addr=s2:26379), or a comma list
	// of host:port Redis Cluster nodes. Required with store redis,
	// rate_limit_store redis or any enqueue route. Env REDIS_URL, when set,
	// replaces it.
	RedisURL string `yaml:"redis_url"`
	// Log configures the process logger.
	Log Log `yaml:"log"`
	// Auth says how a request names its tenant.
	Auth Auth `yaml:"auth"`
	// Tenants are the known tenants. At least one unless auth.mode is none.
	Tenants []Tenant `yaml:"tenants"`
	// RateLimitStore keeps the tenants' budgets: "memory" (default,
	// each gateway instance has its own budget) or "redis" (one budget
	// shared by every instance; needs redis_url).
	RateLimitStore string `yaml:"rate_limit_store"`
	// Idempotency holds the settings of every route, the middleware's
	// defaults filled in; a route overrides any of them in its own
	// idempotency block. Its Route is "". Its memory block bounds store
	// memory and is no route's to override.
	Idempotency Idempotency `yaml:"idempotency"`
	// ReplayCache answers replays of recently completed records from the
	// gateway's memory, without a store round trip.
	ReplayCache ReplayCache `yaml:"replay_cache"`
	// Janitor deletes expired idempotency records.
	Janitor Janitor `yaml:"janitor"`
	// JobsRetention is how long a final job (succeeded, failed,
	// cancelled) is kept after it became final, with its attempt ledger
	// and callbacks; the worker's janitor then deletes them. Default
	// job.DefaultRetention, 720h (30 days).
	JobsRetention time.Duration `yaml:"jobs_retention"`
	// ExecutionsRetention is how long a final execution, the
	// once-per-business-key promise, is kept after it ended; a job with
	// the same business key that arrives later runs again. At least
	// JobsRetention. Default execution.DefaultRetention, 2160h (90 days).
	// The special value -1s (any negative duration) keeps executions
	// forever.
	ExecutionsRetention *time.Duration `yaml:"executions_retention"`
	// Proxy configures the transport to upstreams.
	Proxy Proxy `yaml:"proxy"`
	// Server configures the public and admin http.Servers.
	Server Server `yaml:"server"`
	// JobsAPI configures GET /v1/jobs/{id}.
	JobsAPI JobsAPI `yaml:"jobs_api"`
	// Worker configures `idemgate worker` (and the worker inside dev).
	Worker Worker `yaml:"worker"`
	// Limits are the flow limits jobs share (jobs[].limits), enforced by
	// every worker through Redis. Default none.
	Limits []Limit `yaml:"limits"`
	// Broker lays jobs' tasks out in asynq's Redis (broker.shards).
	Broker Broker `yaml:"broker"`
	// Fairness are the pools in which jobs (jobs[].fairness) share the
	// workers fairly between tenants. Default none.
	Fairness []Fairness `yaml:"fairness"`
	// DeclaredSchedules are the recurring schedules the worker fires, as
	// written; Schedules returns them compiled. Default none.
	DeclaredSchedules []Schedule `yaml:"schedules"`
	// DeclaredJobs are the jobs enqueue routes accept and workers run, as
	// written; Jobs and Job return them compiled.
	DeclaredJobs []Job `yaml:"jobs"`
	// Routes are matched against each public request.
	Routes []Route `yaml:"routes"`

	// specs are the compiled jobs, set when the configuration comes from
	// Load or Parse; defaulted are the WithDefaultJobs jobs routes name.
	specs     []*job.Spec
	defaulted []defaultJob
	// limits are the compiled limits, by name.
	limits map[string]job.FlowLimit
	// schedules are the valid schedules (validateSchedules).
	schedules []job.Recurring
	// fairPools are the valid fairness pools (validateFairness).
	fairPools []job.FairPool
	// claimedListeners are the loopback addresses the program's own
	// settings name (WithSettings), for the dev-mode port warnings.
	claimedListeners []claimedListener
	// executionsZero: executions_retention was written 0, which once
	// kept executions forever (retentionWarnings).
	executionsZero bool
}

// claimedListener is an address a claimed setting names.
type claimedListener struct{ key, addr string }

// Admin configures what the admin listener serves beyond the admin API.
type Admin struct {
	// UI serves the operator console at /admin/ui/ (behind the admin
	// token, like the rest of the listener). Default true; it is served
	// only while admin_listen is set.
	UI bool `yaml:"ui"`
	// MaxAuthFailures is how many wrong admin tokens one peer (an IP
	// address; an IPv6 /64) may send within a minute; its next requests,
	// with the right token too, are answered 429 for a minute without
	// being compared. It holds for the worker's admin listener too.
	// Default 10. The special value -1 refuses no peer (an admin listener
	// reached through a proxy, where every peer is the proxy); wrong
	// tokens are still counted and logged.
	MaxAuthFailures int `yaml:"max_auth_failures"`
}

// Log configures the process logger.
type Log struct {
	// Level is "debug", "info" (default), "warn" or "error".
	Level string `yaml:"level"`
	// Format is "json" (default) or "text".
	Format string `yaml:"format"`
	// FlushInterval is how long a line of a running gateway or worker
	// (the access log's, mostly) may wait in memory before it is written,
	// with the lines around it, in one write. Default
	// DefaultLogFlushInterval; 0 writes every line at once. Lines at
	// warning level and above are always written at once.
	FlushInterval *time.Duration `yaml:"flush_interval"`
}

// DefaultLogFlushInterval is log.flush_interval's default.
const DefaultLogFlushInterval = 100 * time.Millisecond

// MaxLogFlushInterval bounds log.flush_interval: a line of a process
// killed without warning is lost if it waited longer.
const MaxLogFlushInterval = 5 * time.Second

// Flush returns log.flush_interval, its default when unset.
func (l Log) Flush() time.Duration {
	if l.FlushInterval == nil {
		return DefaultLogFlushInterval
	}
	return *l.FlushInterval
}

// Auth says how a request names its tenant.
type Auth struct {
	// Mode is one of auth's modes: "api_key" (default: "Bearer <key>" in
	// Header, matched by its SHA-256 against tenants[].api_key_sha256),
	// "header" (Header carries the tenant name) or "none" (every request
	// is tenant "anonymous").
	Mode string `yaml:"mode"`
	// Header carries the credentials. Default "Authorization".
	Header string `yaml:"header"`
	// CrossSite is what the public listener does with a state-changing
	// request a browser sent from another site (Sec-Fetch-Site
	// cross-site, or an Origin that is not the request's host):
	// CrossSiteRefuse answers 403 forbidden, CrossSiteAllow serves it.
	// Requests from the same site and requests without either header
	// (SDKs, curl, servers) are always served. Default CrossSiteRefuse
	// with mode "header", whose proxy may name the tenant from a cookie
	// the browser adds by itself, and CrossSiteAllow otherwise.
	CrossSite string `yaml:"cross_site"`
}

// The values of Auth.CrossSite.
const (
	CrossSiteRefuse = "refuse"
	CrossSiteAllow  = "allow"
)

// Tenant is one client of the gateway. Its name scopes every idempotency
// record and appears in admin URLs.
type Tenant struct {
	// Name: [a-zA-Z0-9_.-]+, unique; "anonymous" is reserved for auth.mode none.
	Name string `yaml:"name"`
	// APIKeySHA256 lists the hex SHA-256 of each of the tenant's API keys
	// (stored lower case). Required with auth.mode api_key.
	APIKeySHA256 []string `yaml:"api_key_sha256"`
	// RateLimit, when set, limits the tenant; nil means not limited.
	RateLimit *RateLimit `yaml:"rate_limit"`
}

// RateLimit is a fixed window: Tokens requests per Interval, as
// ratelimit.Limit; both are required.
type RateLimit struct {
	// Tokens > 0 is the budget of a window, refilled in full every Interval.
	Tokens int `yaml:"tokens"`
	// Interval > 0.
	Interval time.Duration `yaml:"interval"`
}

// ReplayCache is the process-local cache of completed records. Only
// completed records enter it; see idempotency.ReplayCache for what it may
// replay after an operator deletes a record on another instance.
type ReplayCache struct {
	// Off turns the cache off: every replay reads the store.
	Off bool `yaml:"off"`
	// Entries is the most records kept. Default 10000.
	Entries int `yaml:"entries"`
	// TTL is the longest a record is answered from memory. Default 2s.
	TTL time.Duration `yaml:"ttl"`
}

// Janitor deletes expired idempotency records in bounded batches.
type Janitor struct {
	// Interval between runs. Default 1m.
	Interval time.Duration `yaml:"interval"`
	// Batch is the most rows deleted per statement. Default 1000.
	Batch int `yaml:"batch"`
}

// Proxy configures the transport to upstreams.
type Proxy struct {
	// DialTimeout bounds connecting to an upstream. Default 5s.
	DialTimeout time.Duration `yaml:"dial_timeout"`
	// ResponseHeaderTimeout bounds the wait for an upstream's response
	// headers once the request is sent. Default 30s.
	ResponseHeaderTimeout time.Duration `yaml:"response_header_timeout"`
	// IdleConnTimeout closes idle upstream connections. Default 90s.
	IdleConnTimeout time.Duration `yaml:"idle_conn_timeout"`
	// MaxIdleConnsPerHost. Default 256.
	MaxIdleConnsPerHost int `yaml:"max_idle_conns_per_host"`
}

// Server configures the gateway's http.Servers.
type Server struct {
	// ReadHeaderTimeout. Default 10s.
	ReadHeaderTimeout time.Duration `yaml:"read_header_timeout"`
	// ReadTimeout. Default 60s.
	ReadTimeout time.Duration `yaml:"read_timeout"`
	// WriteTimeout. Default 120s.
	WriteTimeout time.Duration `yaml:"write_timeout"`
	// IdleTimeout. Default 120s.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// MaxHeaderBytes. Default 65536.
	MaxHeaderBytes int `yaml:"max_header_bytes"`
	// ShutdownTimeout bounds the graceful shutdown on SIGTERM or SIGINT,
	// DrainDelay included: in-flight requests get what is left of it.
	// Default 30s.
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`
	// DrainDelay is how long the gateway keeps serving once asked to stop,
	// with /readyz answering 503 and every response closing its
	// connection, so that a load balancer takes it out of rotation before
	// its listeners close. Shorter than ShutdownTimeout. Default 0: the
	// listeners close at once, as suits a gateway no balancer polls.
	DrainDelay time.Duration `yaml:"drain_delay"`
	// MaxInFlight is the most requests the public listener handles at
	// once, /healthz and /readyz aside; beyond it a request is answered at
	// once with 503 not-ready and Retry-After, before it claims a key, so
	// that a gateway past its capacity refuses the excess instead of
	// running out of memory or file descriptors. A request in hand costs
	// about 60 KiB with a small body (idembench capacity), more with a
	// body buffered up to max_request_bytes: the default keeps a gateway
	// at its limit within the 256 MiB the Kubernetes base allows. serve
	// lowers it to what the process's descriptor limit allows (two per
	// request). Default 2048.
	MaxInFlight int `yaml:"max_in_flight"`
}

// Worker configures the asynq workers: the workers' own settings, with
// their defaults and rules, and those of the process around them.
type Worker struct {
	// Config holds concurrency, queues, lock_ttl, max_attempts and
	// shutdown_timeout, the workers' defaults filled in.
	workers.Config `yaml:",inline"`
	// AdminListen serves the worker's /metrics and /healthz. Default
	// "127.0.0.1:9091" when the key is absent; "" turns it off.
	AdminListen string `yaml:"admin_listen"`
	// AdminTokenSHA256 is the hex SHA-256 of the bearer token the worker's
	// /metrics needs (/healthz stays open for orchestrators' probes).
	// Default, when the key is absent, the top-level admin_token_sha256;
	// "" (explicit, or with no top-level token) leaves /metrics open.
	AdminTokenSHA256 string `yaml:"admin_token_sha256"`
	// AdminTLS is TLS for the worker's admin listener. Default none.
	AdminTLS *TLSFiles `yaml:"admin_tls"`
	// RequeueAfter is the relay's grace period: a job that has not
	// finished and whose record has not changed for this long has its
	// task looked up in the queue, and enqueued again when the queue has
	// lost it. Positive; an explicit 0 is refused. Default
	// job.DefaultRequeueAfter, 1m.
	RequeueAfter time.Duration `yaml:"requeue_after"`
	// RequeueInterval is the time between two passes of the relay.
	// Positive; an explicit 0 is refused. Default
	// job.DefaultRequeueInterval, 15s.
	RequeueInterval time.Duration `yaml:"requeue_interval"`
}

// RelayOptions returns the settings of the worker's relay. Its takeover
// passes follow lock_ttl; the worker sets Locks.
func (w Worker) RelayOptions() job.RelayOptions {
	return job.RelayOptions{After: w.RequeueAfter, Interval: w.RequeueInterval, LockTTL: w.WithDefaults().LockTTL}
}

// Route maps matching requests to an upstream or to a queued job.
type Route struct {
	// Name: required, unique, [a-z0-9_.-]+. It scopes idempotency records.
	Name string `yaml:"name"`
	// Methods matched, upper case. Empty means every method.
	Methods []string `yaml:"methods"`
	// Path matches exactly. Exactly one of Path and PathPrefix; both
	// start with "/".
	Path string `yaml:"path"`
	// PathPrefix matches the path and everything below it.
	PathPrefix string `yaml:"path_prefix"`
	// Upstream is the http or https URL requests are proxied to. Exactly
	// one of Upstream and Enqueue.
	Upstream string `yaml:"upstream"`
	// Enqueue turns a request into a job instead.
	Enqueue *Enqueue `yaml:"enqueue"`
	// Batch, on an enqueue route, also serves a batch path that submits
	// many of its jobs in one request. Default none.
	Batch *RouteBatch `yaml:"batch"`
	// UpstreamTLS, when set, is how this route's https:// upstream is
	// trusted and, with a client certificate, how the gateway proves
	// itself to it (mutual TLS). Default: the system's roots, no client
	// certificate. Upstream routes only.
	UpstreamTLS *UpstreamTLS `yaml:"upstream_tls"`
	// Timeout, when > 0, bounds the whole upstream exchange of this route.
	// Upstream routes only. Default none beyond the proxy timeouts.
	Timeout time.Duration `yaml:"timeout"`
	// MethodOverride is what the route does with a request that names
	// another method in X-HTTP-Method-Override, X-HTTP-Method or
	// X-Method-Override, headers many frameworks obey: MethodOverrideRefuse
	// (the default, "" too) answers 400 method-override-refused, so an
	// upstream never runs a method the gateway did not protect;
	// MethodOverrideHonour serves it as the method it names (claimed,
	// limited and fingerprinted as that method) and forwards the header.
	MethodOverride string `yaml:"method_override"`
	// Idempotency is the route's settings: its idempotency block read
	// over Config.Idempotency, so that the route inherits every setting it
	// does not write. Route is the route's name. Set by Load and Parse; in
	// a Route built in code, zero settings are the middleware's defaults.
	Idempotency idempotency.Config `yaml:"idempotency"`

	// overrides are the keys of the idempotency block, as written: the
	// settings the route does not inherit.
	overrides map[string]bool
}

// The values of Route.MethodOverride.
const (
	MethodOverrideRefuse = "refuse"
	MethodOverrideHonour = "honour"
)

// Enqueue names the job a request becomes; the request body is its payload.
type Enqueue struct {
	// Task is the task of a job declared under jobs (or supplied by
	// WithDefaultJobs).
	Task string `yaml:"task"`
	// Queue must be one of worker.queues. Default the job's queue.
	Queue string `yaml:"queue"`

	// queueFromJob: Queue is the declared job's, checked where the job
	// declares it.
	queueFromJob bool
}

// Route returns the route called name.
func (c *Config) Route(name string) (*Route, bool) {
	for i := range c.Routes {
		if c.Routes[i].Name == name {
			return &c.Routes[i], true
		}
	}
	return nil, false
}

// The keys whose empty value turns a listener off start at these, so that
// only an explicit "" clears them.
const (
	defaultAdminListen       = "127.0.0.1:9090"
	defaultWorkerAdminListen = "127.0.0.1:9091"
)

// inheritAdminToken stands for an absent worker.admin_token_sha256 until
// withDefaults gives it the top-level token; it can never be a hex digest.
const inheritAdminToken = "(admin_token_sha256)"

// defaultWorker is the worker section before the file is read: the keys
// whose zero value is refused rather than defaulted start at their
// defaults, so that only an explicit value, checked, replaces them.
func defaultWorker() Worker {
	return Worker{
		AdminListen:      defaultWorkerAdminListen,
		AdminTokenSHA256: inheritAdminToken,
		RequeueAfter:     job.DefaultRequeueAfter,
		RequeueInterval:  job.DefaultRequeueInterval,
	}
}

// withDefaults fills every unset field with the default documented on it
// and normalises case where the value is compared later (methods, hex).
func (c *Config) withDefaults() {
	setDefault(&c.Listen, ":8080")
	setDefault(&c.ProblemBase, problem.DefaultBase)
	setDefault(&c.Store, "postgres")
	setDefault(&c.Log.Level, "info")
	setDefault(&c.Log.Format, "json")
	setDefault(&c.Auth.Mode, string(auth.ModeAPIKey))
	setDefault(&c.Auth.Header, "Authorization")
	if c.Auth.Mode == string(auth.ModeHeader) {
		setDefault(&c.Auth.CrossSite, CrossSiteRefuse)
	}
	setDefault(&c.Auth.CrossSite, CrossSiteAllow)
	setDefault(&c.RateLimitStore, "memory")
	setDefault(&c.Admin.MaxAuthFailures, 10)
	c.AdminTokenSHA256 = strings.ToLower(c.AdminTokenSHA256)
	if c.Worker.AdminTokenSHA256 == inheritAdminToken {
		c.Worker.AdminTokenSHA256 = c.AdminTokenSHA256
	}
	c.Worker.AdminTokenSHA256 = strings.ToLower(c.Worker.AdminTokenSHA256)
	for i := range c.Tenants {
		for k, h := range c.Tenants[i].APIKeySHA256 {
			c.Tenants[i].APIKeySHA256[k] = strings.ToLower(h)
		}
	}
	c.Idempotency.Config = c.Idempotency.WithDefaults()
	c.Idempotency.Memory.withDefaults(c.memoryTenants())

	setDefault(&c.ReplayCache.Entries, 10000)
	setDefault(&c.ReplayCache.TTL, 2*time.Second)
	setDefault(&c.Janitor.Interval, time.Minute)
	setDefault(&c.Janitor.Batch, 1000)
	c.retentionDefaults()

	setDefault(&c.Proxy.DialTimeout, 5*time.Second)
	setDefault(&c.Proxy.ResponseHeaderTimeout, 30*time.Second)
	setDefault(&c.Proxy.IdleConnTimeout, 90*time.Second)
	setDefault(&c.Proxy.MaxIdleConnsPerHost, 256)

	setDefault(&c.Server.ReadHeaderTimeout, 10*time.Second)
	setDefault(&c.Server.ReadTimeout, 60*time.Second)
	setDefault(&c.Server.WriteTimeout, 120*time.Second)
	setDefault(&c.Server.IdleTimeout, 120*time.Second)
	setDefault(&c.Server.MaxHeaderBytes, 65536)
	setDefault(&c.Server.ShutdownTimeout, 30*time.Second)
	setDefault(&c.Server.MaxInFlight, 2048)
	c.jobsAPIDefaults()
	c.batchDefaults()

	c.Worker.Config = c.Worker.WithDefaults()

	for i := range c.Routes {
		r := &c.Routes[i]
		r.Methods = upper(r.Methods)
		// jobDefaults gives an enqueue route its job's queue.
	}
}

func setDefault[T comparable](field *T, def T) {
	var zero T
	if *field == zero {
		*field = def
	}
}

func upper(methods []string) []string {
	if methods == nil {
		return nil
	}
	out := make([]string, len(methods))
	for i, m := range methods {
		out[i] = strings.ToUpper(m)
	}
	return out
}
