package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/url"
	"os"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/idemgate/idemgate/job"
)

// Config is the whole configuration of idemgate: the gateway (serve), the
// worker and dev mode read the same file. The yaml tags are the public key
// names. Every field documents its default; a zero value means that default
// unless the field says otherwise.
type Config struct {
	// Listen is the address of the public API. Default ":8080".
	Listen string `yaml:"listen"`
	// AdminListen serves /metrics and /admin/... Default "127.0.0.1:9090"
	// when the key is absent; admin_listen: "" turns the admin listener off.
	AdminListen string `yaml:"admin_listen"`
	// AdminTokenSHA256 is the hex SHA-256 of the admin bearer token (64 hex
	// digits, stored lower case). Required unless AdminListen is "".
	AdminTokenSHA256 string `yaml:"admin_token_sha256"`
	// ProblemBase prefixes every problem+json type. An absolute URL ending
	// in "/". Default "https://idemgate.dev/problems/".
	ProblemBase string `yaml:"problem_base"`
	// Store holds idempotency records: "postgres" (default), "redis" or
	// "memory".
	Store string `yaml:"store"`
	// DatabaseURL is the PostgreSQL connection string (postgres:// URL or
	// key=value). Required with store postgres. Env DATABASE_URL, when set,
	// replaces it.
	DatabaseURL string `yaml:"database_url"`
	// RedisURL is redis://…, rediss://… or a comma list of host:port
	// Redis Cluster nodes. Required with store redis, rate_limit_store redis
	// or any enqueue route. Env REDIS_URL, when set, replaces it.
	RedisURL string `yaml:"redis_url"`
	// Log configures the process logger.
	Log Log `yaml:"log"`
	// Auth says how a request names its tenant.
	Auth Auth `yaml:"auth"`
	// Tenants are the known tenants. At least one unless auth.mode is none.
	Tenants []Tenant `yaml:"tenants"`
	// RateLimitStore keeps the tenants' token buckets: "memory" (default,
	// each gateway instance has its own budget) or "redis" (one budget
	// shared by every instance; needs redis_url).
	RateLimitStore string `yaml:"rate_limit_store"`
	// Idempotency holds the defaults of every route; a route overrides any
	// of them in its own idempotency block.
	Idempotency Idempotency `yaml:"idempotency"`
	// ReplayCache answers replays of recently completed records from the
	// gateway's memory, without a store round trip.
	ReplayCache ReplayCache `yaml:"replay_cache"`
	// Janitor deletes expired idempotency records.
	Janitor Janitor `yaml:"janitor"`
	// Proxy configures the transport to upstreams.
	Proxy Proxy `yaml:"proxy"`
	// Server configures the public and admin http.Servers.
	Server Server `yaml:"server"`
	// Worker configures `idemgate worker` (and the worker inside dev).
	Worker Worker `yaml:"worker"`
	// DeclaredJobs are the jobs enqueue routes accept and workers run, as
	// written; Jobs and Job return them compiled.
	DeclaredJobs []Job `yaml:"jobs"`
	// Routes are matched against each public request.
	Routes []Route `yaml:"routes"`

	// specs are the compiled jobs, set when the configuration comes from
	// Load or Parse; defaulted are the WithDefaultJobs jobs routes name.
	specs     []*job.Spec
	defaulted []defaultJob
}

// Log configures the process logger.
type Log struct {
	// Level is "debug", "info" (default), "warn" or "error".
	Level string `yaml:"level"`
	// Format is "json" (default) or "text".
	Format string `yaml:"format"`
}

// Auth says how a request names its tenant.
type Auth struct {
	// Mode is "api_key" (default: "Bearer <key>" in Header, matched by its
	// SHA-256 against tenants[].api_key_sha256), "header" (Header carries
	// the tenant name) or "none" (every request is tenant "anonymous").
	Mode string `yaml:"mode"`
	// Header carries the credentials. Default "Authorization".
	Header string `yaml:"header"`
}

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

// RateLimit is a token bucket: Tokens requests per Interval.
type RateLimit struct {
	// Tokens > 0 is the bucket size, refilled every Interval.
	Tokens int `yaml:"tokens"`
	// Interval > 0.
	Interval Duration `yaml:"interval"`
}

// Idempotency is a complete set of idempotency settings: the defaults in
// Config.Idempotency, or a route's effective settings from
// Route.Idempotency.
type Idempotency struct {
	// Methods that require an Idempotency-Key, upper case. Default POST,
	// PATCH; an explicit empty list means no method needs one.
	Methods []string `yaml:"methods"`
	// KeySyntax is "compat" (default: an RFC 8941 sf-string or a bare token)
	// or "strict" (sf-string only).
	KeySyntax string `yaml:"key_syntax"`
	// MaxKeyLength after parsing, 1..4096. Default 255.
	MaxKeyLength int `yaml:"max_key_length"`
	// Retention of a record. Default 24h.
	Retention Duration `yaml:"retention"`
	// Lease of a claim, at least 100ms and at most Retention. Default 30s.
	Lease Duration `yaml:"lease"`
	// WaitInFlight > 0 holds a concurrent duplicate and replays the
	// original's response instead of answering 409. Default 0.
	WaitInFlight Duration `yaml:"wait_in_flight"`
	// MaxRequestBytes bounds a request body (413 beyond). Default 1048576.
	MaxRequestBytes int64 `yaml:"max_request_bytes"`
	// MaxStoredResponseBytes bounds a stored response body; a larger one is
	// stored without its body. Default 1048576.
	MaxStoredResponseBytes int64 `yaml:"max_stored_response_bytes"`
	// Fingerprint chooses what, besides method, route, path, query and
	// Content-Type, identifies a request.
	Fingerprint Fingerprint `yaml:"fingerprint"`
	// OnStoreError is "fail_closed" (default: 503) or "fail_open" (run the
	// request unprotected).
	OnStoreError string `yaml:"on_store_error"`
	// OnAmbiguous is "release" (default: a retry runs again with the same
	// key forwarded) or "hold" (409 until an operator resolves the key).
	OnAmbiguous string `yaml:"on_ambiguous"`
}

// Fingerprint chooses what identifies a request. In a route's override a
// nil list inherits the default and a non-nil one (even empty) replaces it.
type Fingerprint struct {
	// Headers are request headers included in the fingerprint. Default none.
	Headers []string `yaml:"headers"`
	// JSONFields are JSON Pointers ("/order_id"): when set, only these
	// fields of a JSON body count. Default none: the whole body, canonical.
	JSONFields []string `yaml:"json_fields"`
}

// IdempotencyOverride is a route's idempotency block: each field that is
// set (non-nil) replaces the default of Config.Idempotency.
type IdempotencyOverride struct {
	Methods                []string    `yaml:"methods"`
	KeySyntax              *string     `yaml:"key_syntax"`
	MaxKeyLength           *int        `yaml:"max_key_length"`
	Retention              *Duration   `yaml:"retention"`
	Lease                  *Duration   `yaml:"lease"`
	WaitInFlight           *Duration   `yaml:"wait_in_flight"`
	MaxRequestBytes        *int64      `yaml:"max_request_bytes"`
	MaxStoredResponseBytes *int64      `yaml:"max_stored_response_bytes"`
	Fingerprint            Fingerprint `yaml:"fingerprint"`
	OnStoreError           *string     `yaml:"on_store_error"`
	OnAmbiguous            *string     `yaml:"on_ambiguous"`
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
	TTL Duration `yaml:"ttl"`
}

// Janitor deletes expired idempotency records in bounded batches.
type Janitor struct {
	// Interval between runs. Default 1m.
	Interval Duration `yaml:"interval"`
	// Batch is the most rows deleted per statement. Default 1000.
	Batch int `yaml:"batch"`
}

// Proxy configures the transport to upstreams.
type Proxy struct {
	// DialTimeout bounds connecting to an upstream. Default 5s.
	DialTimeout Duration `yaml:"dial_timeout"`
	// ResponseHeaderTimeout bounds the wait for an upstream's response
	// headers once the request is sent. Default 30s.
	ResponseHeaderTimeout Duration `yaml:"response_header_timeout"`
	// IdleConnTimeout closes idle upstream connections. Default 90s.
	IdleConnTimeout Duration `yaml:"idle_conn_timeout"`
	// MaxIdleConnsPerHost. Default 256.
	MaxIdleConnsPerHost int `yaml:"max_idle_conns_per_host"`
}

// Server configures the gateway's http.Servers.
type Server struct {
	// ReadHeaderTimeout. Default 10s.
	ReadHeaderTimeout Duration `yaml:"read_header_timeout"`
	// ReadTimeout. Default 60s.
	ReadTimeout Duration `yaml:"read_timeout"`
	// WriteTimeout. Default 120s.
	WriteTimeout Duration `yaml:"write_timeout"`
	// IdleTimeout. Default 120s.
	IdleTimeout Duration `yaml:"idle_timeout"`
	// MaxHeaderBytes. Default 65536.
	MaxHeaderBytes int `yaml:"max_header_bytes"`
	// ShutdownTimeout bounds the graceful drain on shutdown. Default 30s.
	ShutdownTimeout Duration `yaml:"shutdown_timeout"`
}

// Worker configures the asynq workers.
type Worker struct {
	// AdminListen serves the worker's /metrics and /healthz. Default
	// "127.0.0.1:9091" when the key is absent; "" turns it off.
	AdminListen string `yaml:"admin_listen"`
	// Concurrency is the number of jobs run at once. Default 10.
	Concurrency int `yaml:"concurrency"`
	// Queues maps each queue to its priority (> 0). Default {default: 1}.
	Queues map[string]int `yaml:"queues"`
	// LockTTL of a resource lock, renewed every LockTTL/3. Default 30s.
	LockTTL Duration `yaml:"lock_ttl"`
	// MaxAttempts counts real attempts (lock contention is not one).
	// Default 10.
	MaxAttempts int `yaml:"max_attempts"`
	// PartnerURL is where payment.charge and notification.send go; dev
	// mode runs partnersim there. Default "http://127.0.0.1:9100".
	PartnerURL string `yaml:"partner_url"`
	// ShutdownTimeout bounds the wait for running jobs on shutdown.
	// Default 30s.
	ShutdownTimeout Duration `yaml:"shutdown_timeout"`
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
	// Timeout, when > 0, bounds the whole upstream exchange of this route.
	// Upstream routes only. Default none beyond the proxy timeouts.
	Timeout Duration `yaml:"timeout"`
	// IdempotencyOverride is the route's idempotency block; read the
	// effective settings with Idempotency.
	IdempotencyOverride IdempotencyOverride `yaml:"idempotency"`

	// inherited are the defaults the override applies to, set when the
	// route comes from Load or Parse.
	inherited  Idempotency
	inheritSet bool
}

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

// Duration is a time.Duration written as a Go duration string ("30s").
type Duration time.Duration

func (d Duration) String() string { return time.Duration(d).String() }

// MarshalYAML writes d as a Go duration string.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// UnmarshalYAML reads a Go duration string. A bare number is refused
// rather than guessed at: "30" could mean seconds or nanoseconds.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, msg := parseDuration(n)
	if msg != "" {
		// A *yaml.TypeError lets the decoder go on and report the
		// other mistakes too.
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %s", n.Line, msg)}}
	}
	*d = v
	return nil
}

func parseDuration(n *yaml.Node) (Duration, string) {
	if n.Kind != yaml.ScalarNode {
		return 0, "must be a duration such as 30s, not " + describe(n)
	}
	d, err := time.ParseDuration(strings.TrimSpace(n.Value))
	if err != nil {
		return 0, fmt.Sprintf("%q is not a duration (use %s)", n.Value, durationHint(strings.TrimSpace(n.Value)))
	}
	return Duration(d), ""
}

func durationHint(s string) string {
	if isDecimal(s) {
		return s + "s"
	}
	if days, ok := strings.CutSuffix(s, "d"); ok {
		if n, err := strconv.Atoi(days); err == nil && n > 0 && n <= 10000 {
			return fmt.Sprintf("%dh", 24*n)
		}
	}
	return "a Go duration such as 30s, 5m or 1h30m"
}

func isDecimal(s string) bool {
	s = strings.TrimPrefix(s, "-")
	digits, dots := 0, 0
	for _, c := range s {
		switch {
		case c >= '0' && c <= '9':
			digits++
		case c == '.':
			dots++
		default:
			return false
		}
	}
	return digits > 0 && dots <= 1
}

// Problem is one mistake in a configuration.
type Problem struct {
	// File is the name given to Load or Parse.
	File string
	// Line is 1-based; 0 when unknown.
	Line int
	// Key is the key path, like routes[1].idempotency.lease; "" when the
	// problem is with the file as a whole.
	Key string
	// Message says what is wrong, in one line.
	Message string
}

// Error formats p as FILE:LINE: KEY: MESSAGE, leaving out the parts that
// are unknown.
func (p Problem) Error() string {
	var b strings.Builder
	b.WriteString(p.File)
	if p.Line > 0 {
		if b.Len() > 0 {
			b.WriteByte(':')
		}
		b.WriteString(strconv.Itoa(p.Line))
	}
	if b.Len() > 0 {
		b.WriteString(": ")
	}
	if p.Key != "" {
		b.WriteString(p.Key)
		b.WriteString(": ")
	}
	b.WriteString(p.Message)
	return b.String()
}

// Problems is every mistake found in a configuration, in file order
// (problems without a line last). Load and Parse return it as their error.
type Problems struct {
	List []Problem
}

// Error prints one problem per line.
func (p *Problems) Error() string {
	lines := make([]string, len(p.List))
	for i, pr := range p.List {
		lines[i] = pr.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap returns each Problem, as errors.Join would.
func (p *Problems) Unwrap() []error {
	errs := make([]error, len(p.List))
	for i, pr := range p.List {
		errs[i] = pr
	}
	return errs
}

// Load reads the configuration file at path; see Parse. A file that
// cannot be read is reported as the wrapped os error, not as Problems.
func Load(path string, getenv func(string) string, opts ...Option) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return Parse(data, path, getenv, opts...)
}

// Parse reads a configuration: it expands ${VAR} and ${VAR:-default} from
// getenv (nil means an empty environment), decodes the YAML refusing
// unknown keys, lets env DATABASE_URL and REDIS_URL replace the file's
// values, fills the defaults and validates the result, compiling every
// job's schema. name labels problems, and a jobs[].schema_file is read
// relative to its directory. The error, if any, is a *Problems listing
// every mistake.
func Parse(data []byte, name string, getenv func(string) string, opts ...Option) (*Config, error) {
	o := newOptions(name, opts)
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	p := &parser{
		file:    name,
		bad:     map[string]bool{},
		lines:   map[string]int{},
		marks:   map[int][]mark{},
		fromEnv: map[string]string{},
		skipped: map[string]bool{},
		onLine:  map[int]bool{},
		visited: map[visit]bool{},
		budget:  100_000,
	}
	expanded, refs := expand(data, getenv)
	// Keys whose empty value means "off" start at their default, so that
	// only an explicit "" clears them.
	cfg := &Config{AdminListen: defaultAdminListen, Worker: Worker{AdminListen: defaultWorkerAdminListen}}
	ok := p.decode(expanded, cfg)
	for _, r := range refs {
		p.fail(r.line, p.keyAt(r.line, r.col), "%s", r.msg)
	}
	if !ok {
		// Without a document there is nothing meaningful to validate.
		return nil, p.result()
	}
	for _, env := range []struct {
		key, name string
		field     *string
	}{
		{"database_url", "DATABASE_URL", &cfg.DatabaseURL},
		{"redis_url", "REDIS_URL", &cfg.RedisURL},
	} {
		if v := getenv(env.name); v != "" {
			*env.field = v
			p.fromEnv[env.key] = env.name
		}
	}
	if p.skipped[""] {
		return nil, p.result()
	}
	for k := range p.skipped {
		p.bad[k] = true
	}
	cfg.withDefaults()
	cfg.jobDefaults(o)
	if err := cfg.validate(o); err != nil {
		for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
			var pr Problem
			if errors.As(e, &pr) {
				p.validation(pr)
			}
		}
	}
	if len(p.list) > 0 {
		return nil, p.result()
	}
	return cfg, nil
}

const (
	defaultAdminListen       = "127.0.0.1:9090"
	defaultWorkerAdminListen = "127.0.0.1:9091"
)

// withDefaults fills every unset field with the default documented on it
// and normalises case where the value is compared later (methods, hex).
func (c *Config) withDefaults() {
	setDefault(&c.Listen, ":8080")
	setDefault(&c.ProblemBase, "https://idemgate.dev/problems/")
	setDefault(&c.Store, "postgres")
	setDefault(&c.Log.Level, "info")
	setDefault(&c.Log.Format, "json")
	setDefault(&c.Auth.Mode, "api_key")
	setDefault(&c.Auth.Header, "Authorization")
	setDefault(&c.RateLimitStore, "memory")
	c.AdminTokenSHA256 = strings.ToLower(c.AdminTokenSHA256)
	for i := range c.Tenants {
		for k, h := range c.Tenants[i].APIKeySHA256 {
			c.Tenants[i].APIKeySHA256[k] = strings.ToLower(h)
		}
	}
	c.Idempotency = c.Idempotency.withDefaults()

	setDefault(&c.ReplayCache.Entries, 10000)
	setDefault(&c.ReplayCache.TTL, Duration(2*time.Second))
	setDefault(&c.Janitor.Interval, Duration(time.Minute))
	setDefault(&c.Janitor.Batch, 1000)

	setDefault(&c.Proxy.DialTimeout, Duration(5*time.Second))
	setDefault(&c.Proxy.ResponseHeaderTimeout, Duration(30*time.Second))
	setDefault(&c.Proxy.IdleConnTimeout, Duration(90*time.Second))
	setDefault(&c.Proxy.MaxIdleConnsPerHost, 256)

	setDefault(&c.Server.ReadHeaderTimeout, Duration(10*time.Second))
	setDefault(&c.Server.ReadTimeout, Duration(60*time.Second))
	setDefault(&c.Server.WriteTimeout, Duration(120*time.Second))
	setDefault(&c.Server.IdleTimeout, Duration(120*time.Second))
	setDefault(&c.Server.MaxHeaderBytes, 65536)
	setDefault(&c.Server.ShutdownTimeout, Duration(30*time.Second))

	setDefault(&c.Worker.Concurrency, 10)
	if c.Worker.Queues == nil {
		c.Worker.Queues = map[string]int{"default": 1}
	}
	setDefault(&c.Worker.LockTTL, Duration(30*time.Second))
	setDefault(&c.Worker.MaxAttempts, 10)
	setDefault(&c.Worker.PartnerURL, "http://127.0.0.1:9100")
	setDefault(&c.Worker.ShutdownTimeout, Duration(30*time.Second))

	for i := range c.Routes {
		r := &c.Routes[i]
		r.Methods = upper(r.Methods)
		// jobDefaults gives an enqueue route its job's queue.
		r.inherited, r.inheritSet = c.Idempotency, true
	}
}

func (d Idempotency) withDefaults() Idempotency {
	if d.Methods == nil {
		d.Methods = []string{"POST", "PATCH"}
	}
	d.Methods = upper(d.Methods)
	setDefault(&d.KeySyntax, "compat")
	setDefault(&d.MaxKeyLength, 255)
	setDefault(&d.Retention, Duration(24*time.Hour))
	setDefault(&d.Lease, Duration(30*time.Second))
	setDefault(&d.MaxRequestBytes, 1<<20)
	setDefault(&d.MaxStoredResponseBytes, 1<<20)
	setDefault(&d.OnStoreError, "fail_closed")
	setDefault(&d.OnAmbiguous, "release")
	return d
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

// Route returns the route called name.
func (c *Config) Route(name string) (*Route, bool) {
	for i := range c.Routes {
		if c.Routes[i].Name == name {
			return &c.Routes[i], true
		}
	}
	return nil, false
}

// Idempotency returns the route's effective settings: its overrides on top
// of the configuration's defaults (the built-in defaults for a route that
// did not come from Load or Parse). The slices are the caller's own.
func (r *Route) Idempotency() Idempotency {
	d := r.inherited
	if !r.inheritSet {
		d = Idempotency{}.withDefaults()
	}
	o := r.IdempotencyOverride
	if o.Methods != nil {
		d.Methods = upper(o.Methods)
	}
	override(&d.KeySyntax, o.KeySyntax)
	override(&d.MaxKeyLength, o.MaxKeyLength)
	override(&d.Retention, o.Retention)
	override(&d.Lease, o.Lease)
	override(&d.WaitInFlight, o.WaitInFlight)
	override(&d.MaxRequestBytes, o.MaxRequestBytes)
	override(&d.MaxStoredResponseBytes, o.MaxStoredResponseBytes)
	if o.Fingerprint.Headers != nil {
		d.Fingerprint.Headers = o.Fingerprint.Headers
	}
	if o.Fingerprint.JSONFields != nil {
		d.Fingerprint.JSONFields = o.Fingerprint.JSONFields
	}
	override(&d.OnStoreError, o.OnStoreError)
	override(&d.OnAmbiguous, o.OnAmbiguous)
	d.Methods = slices.Clone(d.Methods)
	d.Fingerprint.Headers = slices.Clone(d.Fingerprint.Headers)
	d.Fingerprint.JSONFields = slices.Clone(d.Fingerprint.JSONFields)
	return d
}

func override[T any](field *T, v *T) {
	if v != nil {
		*field = *v
	}
}

// set reports whether the override sets the field with this key.
func (o IdempotencyOverride) set(key string) bool {
	switch key {
	case "methods":
		return o.Methods != nil
	case "key_syntax":
		return o.KeySyntax != nil
	case "max_key_length":
		return o.MaxKeyLength != nil
	case "retention":
		return o.Retention != nil
	case "lease":
		return o.Lease != nil
	case "wait_in_flight":
		return o.WaitInFlight != nil
	case "max_request_bytes":
		return o.MaxRequestBytes != nil
	case "max_stored_response_bytes":
		return o.MaxStoredResponseBytes != nil
	case "fingerprint.headers":
		return o.Fingerprint.Headers != nil
	case "fingerprint.json_fields":
		return o.Fingerprint.JSONFields != nil
	case "on_store_error":
		return o.OnStoreError != nil
	case "on_ambiguous":
		return o.OnAmbiguous != nil
	}
	return false
}

// Warnings lists what is allowed but probably not meant, one line each.
func (c *Config) Warnings() []string {
	var w []string
	if c.Auth.Mode == "none" {
		w = append(w, `auth.mode none: every request is tenant "anonymous"; unsafe for multi-tenant use`)
		if len(c.Tenants) > 0 {
			w = append(w, "auth.mode none: tenants are ignored")
		}
	}
	w = append(w, c.devClashes()...)
	if c.Store == "memory" {
		w = append(w, "store memory: idempotency records live in this process only; a restart forgets them and other instances never see them")
	}
	for i := range c.Routes {
		r := &c.Routes[i]
		d := r.Idempotency()
		at := fmt.Sprintf("routes[%d] (%s)", i, r.Name)
		if d.OnStoreError == "fail_open" {
			w = append(w, at+": on_store_error fail_open: while the store is unavailable requests run without idempotency protection")
		}
		if len(d.Methods) == 0 {
			w = append(w, at+": idempotency.methods is empty: no request needs an Idempotency-Key")
		}
		if r.Timeout > c.Server.WriteTimeout && c.Server.WriteTimeout > 0 {
			w = append(w, fmt.Sprintf("%s: timeout %s is longer than server.write_timeout %s; the client's connection is cut first", at, r.Timeout, c.Server.WriteTimeout))
		}
	}
	return w
}

// emptySHA256 is the SHA-256 of no bytes: a hash of an empty token.
const emptySHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

type badFunc func(key, format string, args ...any)

// validate checks the defaulted configuration and returns every problem,
// each a Problem with Key and Message, joined.
func (c *Config) validate(o *options) error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, Problem{Key: key, Message: fmt.Sprintf(format, args...)})
	}

	c.validateListeners(bad)
	if c.AdminListen != "" && c.AdminTokenSHA256 == "" {
		bad("admin_token_sha256", `required while admin_listen is set (admin_listen: "" turns the admin listener off)`)
	}
	if c.AdminTokenSHA256 != "" {
		if msg := sha256Problem(c.AdminTokenSHA256); msg != "" {
			bad("admin_token_sha256", "%s", msg)
		}
	}
	if u, err := url.Parse(c.ProblemBase); err != nil || !u.IsAbs() || u.Host == "" || !strings.HasSuffix(c.ProblemBase, "/") {
		bad("problem_base", "%q must be an absolute URL ending in /", c.ProblemBase)
	}

	switch c.Store {
	case "postgres", "redis", "memory":
	default:
		bad("store", "%q is not postgres, redis or memory", c.Store)
	}
	if c.DatabaseURL == "" {
		if c.Store == "postgres" {
			bad("database_url", "required with store postgres; set it here or in DATABASE_URL")
		}
	} else if msg := databaseURLProblem(c.DatabaseURL); msg != "" {
		bad("database_url", "%s", msg)
	}
	var needRedis []string
	if c.Store == "redis" {
		needRedis = append(needRedis, "store redis")
	}
	if c.RateLimitStore == "redis" {
		needRedis = append(needRedis, "rate_limit_store redis")
	}
	for _, r := range c.Routes {
		if r.Enqueue != nil {
			if r.Name != "" {
				needRedis = append(needRedis, fmt.Sprintf("enqueue routes like %q", r.Name))
			} else {
				needRedis = append(needRedis, "enqueue routes")
			}
			break
		}
	}
	if c.RedisURL == "" {
		if len(needRedis) > 0 {
			bad("redis_url", "required with %s; set it here or in REDIS_URL", strings.Join(needRedis, " and "))
		}
	} else if msg := redisURLProblem(c.RedisURL); msg != "" {
		bad("redis_url", "%s", msg)
	}
	switch c.RateLimitStore {
	case "memory", "redis":
	default:
		bad("rate_limit_store", "%q is not memory or redis", c.RateLimitStore)
	}

	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		bad("log.level", "%q is not debug, info, warn or error", c.Log.Level)
	}
	switch c.Log.Format {
	case "json", "text":
	default:
		bad("log.format", "%q is not json or text", c.Log.Format)
	}

	switch c.Auth.Mode {
	case "api_key", "header", "none":
	default:
		bad("auth.mode", "%q is not api_key, header or none", c.Auth.Mode)
	}
	if !isToken(c.Auth.Header) {
		bad("auth.header", "%q is not a header name", c.Auth.Header)
	}
	c.validateTenants(bad)

	validateIdempotency("idempotency", c.Idempotency, func(string) bool { return true }, bad)

	nonNegative(bad, "janitor.interval", c.Janitor.Interval)
	nonNegative(bad, "janitor.batch", c.Janitor.Batch)
	nonNegative(bad, "replay_cache.entries", c.ReplayCache.Entries)
	nonNegative(bad, "replay_cache.ttl", c.ReplayCache.TTL)
	nonNegative(bad, "proxy.dial_timeout", c.Proxy.DialTimeout)
	nonNegative(bad, "proxy.response_header_timeout", c.Proxy.ResponseHeaderTimeout)
	nonNegative(bad, "proxy.idle_conn_timeout", c.Proxy.IdleConnTimeout)
	nonNegative(bad, "proxy.max_idle_conns_per_host", c.Proxy.MaxIdleConnsPerHost)
	nonNegative(bad, "server.read_header_timeout", c.Server.ReadHeaderTimeout)
	nonNegative(bad, "server.read_timeout", c.Server.ReadTimeout)
	nonNegative(bad, "server.write_timeout", c.Server.WriteTimeout)
	nonNegative(bad, "server.idle_timeout", c.Server.IdleTimeout)
	nonNegative(bad, "server.max_header_bytes", c.Server.MaxHeaderBytes)
	nonNegative(bad, "server.shutdown_timeout", c.Server.ShutdownTimeout)

	c.validateWorker(bad)
	c.validateJobs(bad, o)
	c.validateRoutes(bad)
	return errors.Join(errs...)
}

// nonNegative reports a negative number; zero was replaced by the default.
func nonNegative[T int | int64 | Duration](bad badFunc, key string, v T) {
	if v < 0 {
		bad(key, "must be positive, not %v", v)
	}
}

func (c *Config) validateListeners(bad badFunc) {
	ok := func(key, addr string) bool {
		if msg := listenProblem(addr); msg != "" {
			bad(key, "%s", msg)
			return false
		}
		return true
	}
	listenOK := ok("listen", c.Listen)
	if c.AdminListen != "" && ok("admin_listen", c.AdminListen) && listenOK && clash(c.Listen, c.AdminListen) {
		bad("admin_listen", "%q uses the same port as listen %q", c.AdminListen, c.Listen)
	}
	if c.Worker.AdminListen != "" {
		ok("worker.admin_listen", c.Worker.AdminListen)
	}
}

// devClashes lists listeners that `idemgate dev`, which runs the gateway,
// the worker and partnersim in one process, could not all open. Separate
// processes may share a port on different hosts, so these only warn.
func (c *Config) devClashes() []string {
	type listener struct{ key, addr string }
	var ls []listener
	for _, l := range []listener{{"listen", c.Listen}, {"admin_listen", c.AdminListen}, {"worker.admin_listen", c.Worker.AdminListen}} {
		if l.addr != "" && listenProblem(l.addr) == "" {
			ls = append(ls, l)
		}
	}
	if u, err := url.Parse(c.Worker.PartnerURL); err == nil && (u.Scheme == "http" || u.Scheme == "https") && isLoopback(u.Hostname()) {
		port := u.Port()
		if port == "" {
			port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
		}
		ls = append(ls, listener{"worker.partner_url", net.JoinHostPort(u.Hostname(), port)})
	}
	var w []string
	for i := range ls {
		for j := range i {
			if clash(ls[i].addr, ls[j].addr) && !(ls[i].key == "admin_listen" && ls[j].key == "listen") {
				w = append(w, fmt.Sprintf("%s %q uses the same port as %s %q: idemgate dev cannot open both", ls[i].key, ls[i].addr, ls[j].key, ls[j].addr))
				break
			}
		}
	}
	return w
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func listenProblem(addr string) string {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Sprintf(`%q is not host:port (like ":8080" or "127.0.0.1:8080")`, addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Sprintf("%q: port %q is not a number in 0..65535", addr, port)
	}
	return ""
}

// clash reports whether two listen addresses would fight over one port.
func clash(a, b string) bool {
	ha, pa, _ := net.SplitHostPort(a)
	hb, pb, _ := net.SplitHostPort(b)
	if pa != pb || pa == "0" {
		return false
	}
	wildcard := func(h string) bool { return h == "" || h == "0.0.0.0" || h == "::" }
	return ha == hb || wildcard(ha) || wildcard(hb)
}

func (c *Config) validateTenants(bad badFunc) {
	if c.Auth.Mode != "none" && len(c.Tenants) == 0 {
		bad("tenants", "at least one tenant is required with auth.mode %s", c.Auth.Mode)
	}
	names := map[string]int{}
	owner := map[string][2]int{} // key hash → tenant, index
	for i, t := range c.Tenants {
		p := fmt.Sprintf("tenants[%d]", i)
		switch {
		case t.Name == "":
			bad(p+".name", "required")
		case !validName(t.Name, true):
			bad(p+".name", "%q may only contain a-z, A-Z, 0-9, '_', '.' and '-'", t.Name)
		case t.Name == "anonymous":
			bad(p+".name", `"anonymous" is reserved for the tenant of auth.mode none`)
		default:
			if j, dup := names[t.Name]; dup {
				bad(p+".name", "%q is also the name of tenants[%d]", t.Name, j)
			} else {
				names[t.Name] = i
			}
		}
		if c.Auth.Mode == "api_key" && len(t.APIKeySHA256) == 0 {
			bad(p+".api_key_sha256", "required with auth.mode api_key: list the SHA-256 of each key")
		}
		for k, h := range t.APIKeySHA256 {
			kp := fmt.Sprintf("%s.api_key_sha256[%d]", p, k)
			if msg := sha256Problem(h); msg != "" {
				bad(kp, "%s", msg)
				continue
			}
			if o, dup := owner[h]; dup {
				if o[0] == i {
					bad(kp, "the same key as api_key_sha256[%d]", o[1])
				} else {
					bad(kp, "the same key as tenants[%d] (%q); a key must name one tenant", o[0], c.Tenants[o[0]].Name)
				}
				continue
			}
			owner[h] = [2]int{i, k}
		}
		if rl := t.RateLimit; rl != nil {
			if rl.Tokens <= 0 {
				bad(p+".rate_limit.tokens", "must be positive, not %d", rl.Tokens)
			}
			if rl.Interval <= 0 {
				bad(p+".rate_limit.interval", "must be positive, not %s", rl.Interval)
			}
		}
	}
}

// validateIdempotency checks the settings d; set says which fields were
// written at prefix (the others were checked where they were written).
func validateIdempotency(prefix string, d Idempotency, set func(string) bool, bad badFunc) {
	at := func(key string) string { return prefix + "." + key }
	if set("methods") {
		for i, m := range d.Methods {
			if !isToken(m) {
				bad(fmt.Sprintf("%s.methods[%d]", prefix, i), "%q is not an HTTP method", m)
			}
		}
	}
	if set("key_syntax") && d.KeySyntax != "strict" && d.KeySyntax != "compat" {
		bad(at("key_syntax"), "%q is not strict or compat", d.KeySyntax)
	}
	if set("max_key_length") && (d.MaxKeyLength < 1 || d.MaxKeyLength > 4096) {
		bad(at("max_key_length"), "%d is outside 1..4096", d.MaxKeyLength)
	}
	if set("retention") && d.Retention <= 0 {
		bad(at("retention"), "must be positive, not %s", d.Retention)
	}
	switch {
	case !set("lease"):
	case d.Lease <= 0:
		bad(at("lease"), "must be positive, not %s", d.Lease)
	case d.Lease < Duration(100*time.Millisecond):
		bad(at("lease"), "%s is shorter than the minimum 100ms", d.Lease)
	}
	if d.Retention > 0 && d.Lease > d.Retention {
		switch {
		case set("lease"):
			bad(at("lease"), "%s is longer than retention %s", d.Lease, d.Retention)
		case set("retention"):
			bad(at("retention"), "%s is shorter than lease %s", d.Retention, d.Lease)
		}
	}
	if set("wait_in_flight") && d.WaitInFlight < 0 {
		bad(at("wait_in_flight"), "must not be negative, not %s", d.WaitInFlight)
	}
	if set("max_request_bytes") && d.MaxRequestBytes <= 0 {
		bad(at("max_request_bytes"), "must be positive, not %d", d.MaxRequestBytes)
	}
	if set("max_stored_response_bytes") && d.MaxStoredResponseBytes <= 0 {
		bad(at("max_stored_response_bytes"), "must be positive, not %d", d.MaxStoredResponseBytes)
	}
	if set("fingerprint.headers") {
		for i, h := range d.Fingerprint.Headers {
			if !isToken(h) {
				bad(fmt.Sprintf("%s.fingerprint.headers[%d]", prefix, i), "%q is not a header name", h)
			}
		}
	}
	if set("fingerprint.json_fields") {
		for i, f := range d.Fingerprint.JSONFields {
			if msg := jsonPointerProblem(f); msg != "" {
				bad(fmt.Sprintf("%s.fingerprint.json_fields[%d]", prefix, i), "%s", msg)
			}
		}
	}
	if set("on_store_error") && d.OnStoreError != "fail_closed" && d.OnStoreError != "fail_open" {
		bad(at("on_store_error"), "%q is not fail_closed or fail_open", d.OnStoreError)
	}
	if set("on_ambiguous") && d.OnAmbiguous != "release" && d.OnAmbiguous != "hold" {
		bad(at("on_ambiguous"), "%q is not release or hold", d.OnAmbiguous)
	}
}

func (c *Config) validateWorker(bad badFunc) {
	w := c.Worker
	nonNegative(bad, "worker.concurrency", w.Concurrency)
	nonNegative(bad, "worker.lock_ttl", w.LockTTL)
	nonNegative(bad, "worker.max_attempts", w.MaxAttempts)
	nonNegative(bad, "worker.shutdown_timeout", w.ShutdownTimeout)
	if msg := httpURLProblem(w.PartnerURL); msg != "" {
		bad("worker.partner_url", "%s", msg)
	}
	if len(w.Queues) == 0 {
		bad("worker.queues", "needs at least one queue (default: {default: 1})")
	}
	for _, q := range slices.Sorted(maps.Keys(w.Queues)) {
		if !validQueue(q) {
			bad(join("worker.queues", q), "%q is not a queue name (letters, digits, '_', '.', ':' and '-')", q)
		}
		if w.Queues[q] <= 0 {
			bad(join("worker.queues", q), "priority must be positive, not %d", w.Queues[q])
		}
	}
}

func (c *Config) validateRoutes(bad badFunc) {
	type match struct {
		prefix bool
		path   string
	}
	names := map[string]int{}
	seen := map[match][]int{}
	for i := range c.Routes {
		r := &c.Routes[i]
		p := fmt.Sprintf("routes[%d]", i)

		switch {
		case r.Name == "":
			bad(p+".name", "required")
		case !validName(r.Name, false):
			bad(p+".name", "%q may only contain a-z, 0-9, '_', '.' and '-'", r.Name)
		default:
			if j, dup := names[r.Name]; dup {
				bad(p+".name", "%q is also the name of routes[%d]", r.Name, j)
			} else {
				names[r.Name] = i
			}
		}
		for k, m := range r.Methods {
			if !isToken(m) {
				bad(fmt.Sprintf("%s.methods[%d]", p, k), "%q is not an HTTP method", m)
			}
		}

		var m match
		var matchKey string
		switch {
		case r.Path == "" && r.PathPrefix == "":
			bad(p, "needs path or path_prefix")
		case r.Path != "" && r.PathPrefix != "":
			bad(p+".path_prefix", "path and path_prefix exclude each other; keep one")
		case r.Path != "":
			m, matchKey = match{false, r.Path}, p+".path"
		default:
			m, matchKey = match{true, r.PathPrefix}, p+".path_prefix"
		}
		if matchKey != "" {
			if msg := pathProblem(m.path); msg != "" {
				bad(matchKey, "%s", msg)
				matchKey = ""
			}
		}
		if matchKey != "" {
			for _, j := range seen[m] {
				if both := overlap(c.Routes[j].Methods, r.Methods); both != "" {
					bad(matchKey, "%s %s is already routed by routes[%d] (%q)", both, m.path, j, c.Routes[j].Name)
					break
				}
			}
			seen[m] = append(seen[m], i)
		}

		d := r.Idempotency()
		switch {
		case r.Upstream == "" && r.Enqueue == nil:
			bad(p, "needs upstream or enqueue")
		case r.Upstream != "" && r.Enqueue != nil:
			bad(p+".enqueue", "upstream and enqueue exclude each other; keep one")
		case r.Upstream != "":
			if msg := httpURLProblem(r.Upstream); msg != "" {
				bad(p+".upstream", "%s", msg)
			}
		default:
			e := r.Enqueue
			if msg := c.taskProblem(e.Task); msg != "" {
				bad(p+".enqueue.task", "%s", msg)
			}
			switch {
			case e.queueFromJob:
			case !validQueue(e.Queue):
				bad(p+".enqueue.queue", "%q is not a queue name (letters, digits, '_', '.', ':' and '-')", e.Queue)
			case len(c.Worker.Queues) > 0 && c.Worker.Queues[e.Queue] == 0:
				bad(p+".enqueue.queue", "%q is not in worker.queues, so no worker would run its jobs", e.Queue)
			}
			if r.Timeout != 0 {
				bad(p+".timeout", "applies to upstream routes only")
			}
			// The job's identity derives from the key: a method that
			// needs none would enqueue a job nothing can deduplicate.
			if len(r.Methods) == 0 {
				bad(p+".methods", "required on an enqueue route: list the methods that enqueue (each must need an Idempotency-Key)")
			} else {
				var keyless []string
				for _, m := range r.Methods {
					if !slices.Contains(d.Methods, m) {
						keyless = append(keyless, m)
					}
				}
				if len(keyless) > 0 {
					bad(p+".methods", "%s would enqueue without an Idempotency-Key (idempotency.methods: [%s])", strings.Join(keyless, ", "), strings.Join(d.Methods, ", "))
				}
			}
		}
		if r.Timeout < 0 {
			bad(p+".timeout", "must be positive, not %s", r.Timeout)
		}
		validateIdempotency(p+".idempotency", d, r.IdempotencyOverride.set, bad)
	}
}

// overlap names the methods two routes on one path both match, or "".
// No methods means every method.
func overlap(a, b []string) string {
	switch {
	case len(a) == 0 && len(b) == 0:
		return "every method of"
	case len(a) == 0:
		return strings.Join(b, ", ")
	case len(b) == 0:
		return strings.Join(a, ", ")
	}
	var both []string
	for _, m := range b {
		if slices.Contains(a, m) && !slices.Contains(both, m) {
			both = append(both, m)
		}
	}
	return strings.Join(both, ", ")
}

func sha256Problem(h string) string {
	// The value is never echoed: someone may have pasted the secret
	// itself instead of its hash.
	if len(h) != 64 || strings.Trim(strings.ToLower(h), "0123456789abcdef") != "" {
		return fmt.Sprintf("must be the hex SHA-256 of the secret (64 hex digits); this value has %d characters", len(h))
	}
	if strings.ToLower(h) == emptySHA256 {
		return "is the SHA-256 of an empty string"
	}
	return ""
}

// databaseURLProblem never echoes the URL: it may hold a password.
func databaseURLProblem(s string) string {
	if !strings.Contains(s, "://") {
		if strings.Contains(s, "=") {
			return "" // key=value connection string
		}
		return "must be a postgres:// URL or a key=value connection string"
	}
	u, err := url.Parse(s)
	if err != nil {
		return "is not a valid URL"
	}
	if u.Scheme != "postgres" && u.Scheme != "postgresql" {
		return fmt.Sprintf("scheme %q is not postgres or postgresql", u.Scheme)
	}
	return ""
}

// redisURLProblem never echoes a URL: it may hold a password.
func redisURLProblem(s string) string {
	if strings.Contains(s, "://") {
		u, err := url.Parse(s)
		if err != nil {
			return "is not a valid URL"
		}
		if u.Scheme != "redis" && u.Scheme != "rediss" {
			return fmt.Sprintf("scheme %q is not redis or rediss (or use a comma list of host:port cluster nodes)", u.Scheme)
		}
		if u.Host == "" {
			return "the URL has no host"
		}
		return ""
	}
	for node := range strings.SplitSeq(s, ",") {
		node = strings.TrimSpace(node)
		host, port, err := net.SplitHostPort(node)
		n, perr := strconv.Atoi(port)
		if err != nil || host == "" || perr != nil || n <= 0 || n > 65535 {
			return fmt.Sprintf("%q is not host:port (use redis://, rediss:// or a comma list of host:port cluster nodes)", node)
		}
	}
	return ""
}

func httpURLProblem(s string) string {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Sprintf("%q is not an http:// or https:// URL with a host", s)
	}
	return ""
}

func pathProblem(p string) string {
	if !strings.HasPrefix(p, "/") {
		return fmt.Sprintf("%q must start with /", p)
	}
	if strings.ContainsAny(p, "?#") || strings.IndexFunc(p, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0 {
		return fmt.Sprintf("%q must be a plain path, without query, fragment, spaces or control characters", p)
	}
	return ""
}

func jsonPointerProblem(f string) string {
	if !strings.HasPrefix(f, "/") {
		return fmt.Sprintf("%q is not a JSON Pointer (like /order_id)", f)
	}
	for i := 0; i < len(f); i++ {
		if f[i] == '~' && (i+1 == len(f) || (f[i+1] != '0' && f[i+1] != '1')) {
			return fmt.Sprintf("%q: ~ must be followed by 0 or 1", f)
		}
	}
	return ""
}

// isToken reports whether s is an RFC 9110 token: a method or header name.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0 {
			continue
		}
		return false
	}
	return true
}

// validName checks a route name ([a-z0-9_.-]+) or, with upperOK, a tenant
// name ([a-zA-Z0-9_.-]+). Both appear in admin URLs.
func validName(s string, upperOK bool) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-' || upperOK && c >= 'A' && c <= 'Z' {
			continue
		}
		return false
	}
	return true
}

func validQueue(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("_.:-", c) >= 0 {
			continue
		}
		return false
	}
	return true
}

// parser collects the problems of one Parse and knows where each key is.
type parser struct {
	file    string
	list    []Problem
	bad     map[string]bool   // key paths with a problem found while reading
	lines   map[string]int    // key path → line
	marks   map[int][]mark    // line → the keys and list items that start on it
	fromEnv map[string]string // key path → the variable that replaced it
	skipped map[string]bool   // key paths of mappings the decoder leaves out
	onLine  map[int]bool      // lines with a problem
	visited map[visit]bool    // nodes walked, each once even when aliased
	budget  int               // nodes left to walk
}

type visit struct {
	n *yaml.Node
	t reflect.Type
}

type mark struct {
	col  int
	path string
}

func (p *parser) fail(line int, key, format string, args ...any) {
	p.list = append(p.list, Problem{File: p.file, Line: line, Key: key, Message: fmt.Sprintf(format, args...)})
	p.onLine[line] = true
	if key != "" {
		p.bad[key] = true
	}
}

func (p *parser) result() *Problems {
	sort.SliceStable(p.list, func(i, j int) bool {
		a, b := p.list[i].Line, p.list[j].Line
		return a != 0 && (b == 0 || a < b)
	})
	return &Problems{List: p.list}
}

// decode parses the YAML into cfg. It reports false when there is no
// usable document (a syntax error, or not a mapping).
func (p *parser) decode(data []byte, cfg *Config) bool {
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			return true // an empty file: all defaults
		}
		p.yamlError(err)
		return false
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			p.yamlError(err)
		} else {
			p.fail(extra.Line, "", "a second YAML document; the file must hold exactly one")
		}
		return false
	}
	doc := &root
	if doc.Kind == yaml.DocumentNode {
		if len(doc.Content) == 0 {
			return true
		}
		doc = doc.Content[0]
	}
	if isNull(doc) {
		return true
	}
	if doc.Kind != yaml.MappingNode {
		p.fail(doc.Line, "", "the file must be a mapping of keys (listen, store, routes, ...), not %s", describe(doc))
		return false
	}
	p.walk(doc, reflect.TypeFor[Config](), "")

	// The walk above names the key path of every unknown key and bad
	// value; this decoder fills cfg, refusing unknown keys on its own too.
	// Its reports are kept only for lines the walk found nothing on.
	dec = yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	err := dec.Decode(cfg)
	var te *yaml.TypeError
	switch {
	case err == nil:
	case errors.As(err, &te):
		for _, msg := range te.Errors {
			p.decoderError(msg)
		}
	default:
		p.decoderError(strings.TrimPrefix(err.Error(), "yaml: "))
	}
	return true
}

func (p *parser) yamlError(err error) {
	var te *yaml.TypeError
	if errors.As(err, &te) {
		for _, msg := range te.Errors {
			p.decoderError(msg)
		}
		return
	}
	line, msg := splitLine(strings.TrimPrefix(err.Error(), "yaml: "))
	p.fail(line, "", "%s", msg)
}

func (p *parser) decoderError(msg string) {
	line, msg := splitLine(msg)
	if line > 0 && p.onLine[line] {
		return
	}
	p.fail(line, p.keyAt(line, 0), "%s", msg)
}

// splitLine takes the "line N: " prefix off a yaml message.
func splitLine(msg string) (int, string) {
	rest, ok := strings.CutPrefix(msg, "line ")
	if !ok {
		return 0, oneLine(msg)
	}
	num, text, ok := strings.Cut(rest, ": ")
	n, err := strconv.Atoi(num)
	if !ok || err != nil {
		return 0, oneLine(msg)
	}
	return n, oneLine(text)
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// walk checks node n against the Go type t at key path path: unknown and
// repeated keys, and values of the wrong type, each with its line. It
// records where every key is, for the problems found later.
func (p *parser) walk(n *yaml.Node, t reflect.Type, path string) {
	if p.budget--; p.budget < 0 {
		return // the decoder still reports what is left
	}
	for n.Kind == yaml.AliasNode {
		if n = n.Alias; n == nil {
			return
		}
	}
	if isNull(n) {
		return
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	// An anchor's content is checked once, where it is written; this also
	// ends alias cycles, which the decoder reports.
	if p.visited[visit{n, t}] {
		return
	}
	p.visited[visit{n, t}] = true
	if t == reflect.TypeFor[yaml.Node]() {
		return // a job's inline schema: its keys are the schema's, not ours
	}
	if t == reflect.TypeFor[Duration]() {
		if _, msg := parseDuration(n); msg != "" {
			p.fail(n.Line, path, "%s", msg)
		}
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			p.fail(n.Line, path, "must be a mapping, not %s", describe(n))
			return
		}
		fields := yamlFields(t)
		p.pairs(n, path, func(k, v *yaml.Node, child string) {
			f, ok := fields[k.Value]
			if !ok {
				p.fail(k.Line, child, "unknown key%s", suggest(k.Value, fields))
				return
			}
			p.walk(v, f, child)
		}, func(m *yaml.Node) { p.walk(m, t, path) })
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			p.fail(n.Line, path, "must be a mapping, not %s", describe(n))
			return
		}
		p.pairs(n, path, func(_, v *yaml.Node, child string) {
			p.walk(v, t.Elem(), child)
		}, func(m *yaml.Node) { p.walk(m, t, path) })
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			p.fail(n.Line, path, "must be a list, not %s", describe(n))
			return
		}
		for i, item := range n.Content {
			child := fmt.Sprintf("%s[%d]", path, i)
			p.mark(item, child)
			if isNull(item) && !nillable(t.Elem()) {
				p.fail(item.Line, child, "is an empty entry")
			} else {
				p.walk(item, t.Elem(), child)
			}
			// The decoder drops an entry it cannot read, which shifts the
			// later ones: the list's indices no longer match the file, so
			// nothing under it is validated.
			if p.skipped[child] || p.bad[child] {
				p.bad[path] = true
			}
		}
	default:
		if n.Kind != yaml.ScalarNode {
			p.fail(n.Line, path, "must be %s, not %s", kindName(t), describe(n))
			return
		}
		if err := n.Decode(reflect.New(t).Interface()); err != nil {
			p.fail(n.Line, path, "%q is not %s", n.Value, kindName(t))
		}
	}
}

// pairs visits the entries of mapping n, reporting repeated keys and
// handing YAML merge keys (<<: *anchor) to merge.
func (p *parser) pairs(n *yaml.Node, path string, each func(k, v *yaml.Node, child string), merge func(*yaml.Node)) {
	first := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
			for v.Kind == yaml.AliasNode && v.Alias != nil {
				v = v.Alias
			}
			if v.Kind == yaml.SequenceNode {
				for _, m := range v.Content {
					merge(m)
				}
			} else {
				merge(v)
			}
			continue
		}
		if k.Kind != yaml.ScalarNode {
			p.fail(k.Line, path, "a key must be a plain name, not %s", describe(k))
			continue
		}
		child := join(path, k.Value)
		p.mark(k, child)
		if line, dup := first[k.Value]; dup {
			p.fail(k.Line, child, "set twice (first on line %d)", line)
			// The decoder skips a mapping with a repeated key, so what
			// it holds cannot be validated.
			p.skipped[path] = true
			continue
		}
		first[k.Value] = k.Line
		each(k, v, child)
	}
}

func (p *parser) mark(n *yaml.Node, path string) {
	if _, ok := p.lines[path]; !ok {
		p.lines[path] = n.Line
	}
	p.marks[n.Line] = append(p.marks[n.Line], mark{n.Column, path})
}

// keyAt returns the key path of the last key or list item starting on line
// at or before column col (the first one when col is 0).
func (p *parser) keyAt(line, col int) string {
	key := ""
	for _, m := range p.marks[line] {
		if key == "" || (col > 0 && m.col <= col) {
			key = m.path
		}
	}
	// A value on a line of its own belongs to the last key above it.
	for l := line - 1; key == "" && l > 0; l-- {
		if ms := p.marks[l]; len(ms) > 0 {
			key = ms[len(ms)-1].path
		}
	}
	return key
}

// validation files a problem found by validate, placed at its key's line
// (or its nearest parent's) unless an earlier problem explains it.
func (p *parser) validation(pr Problem) {
	for k := pr.Key; k != ""; k = parent(k) {
		if p.bad[k] {
			return
		}
	}
	pr.File = p.file
	if env, ok := p.fromEnv[pr.Key]; ok {
		pr.Message += " (from " + env + ")"
	} else {
		for k := pr.Key; k != "" && pr.Line == 0; k = parent(k) {
			pr.Line = p.lines[k]
		}
	}
	p.list = append(p.list, pr)
}

// parent drops the last element of a key path: a.b[2].c → a.b[2] → a.b.
func parent(key string) string {
	if i := strings.LastIndexAny(key, ".["); i >= 0 {
		return key[:i]
	}
	return ""
}

// join appends key to path, quoting a key that is not a plain name so a
// path stays on one line and unambiguous.
func join(path, key string) string {
	if !validQueue(key) {
		key = strconv.Quote(key)
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

func nillable(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Map, reflect.Interface:
		return true
	}
	return false
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return strconv.Quote(n.Value)
	}
	return "an alias"
}

func kindName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Bool:
		return "true or false"
	case reflect.Float32, reflect.Float64:
		return "a number"
	}
	return "a " + t.Kind().String()
}

// yamlFields maps each yaml key of struct type t to its field's type.
func yamlFields(t reflect.Type) map[string]reflect.Type {
	fields := map[string]reflect.Type{}
	for f := range t.Fields() {
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		fields[name] = f.Type
	}
	return fields
}

// suggest names the known key closest to a mistyped one, if one is close.
func suggest(key string, fields map[string]reflect.Type) string {
	best, bestDist := "", 3
	for _, name := range slices.Sorted(maps.Keys(fields)) {
		if d := distance(strings.ToLower(key), name); d < bestDist && d <= max(1, len(name)/3) {
			best, bestDist = name, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf("; did you mean %q?", best)
}

// distance is the Levenshtein distance between a and b, in bytes.
func distance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 64
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// envRef is a problem with a ${VAR} reference, at its line and column in
// the expanded text.
type envRef struct {
	line, col int
	msg       string
}

// expand replaces ${VAR} and ${VAR:-default} in data with values from
// getenv, outside comments. A reference to a variable that is unset (or
// empty) and has no default is reported and replaced by nothing; $${ is a
// literal ${. The expansion is textual, as with envsubst, so that a
// reference can stand for a number as well as a string.
func expand(data []byte, getenv func(string) string) ([]byte, []envRef) {
	var out bytes.Buffer
	out.Grow(len(data))
	var refs []envRef
	for lineNo := 1; len(data) > 0; lineNo++ {
		line, rest, nl := bytes.Cut(data, []byte("\n"))
		data = rest
		start := out.Len()
		var quote byte // the quote of the scalar being scanned, if any
		for i := 0; i < len(line); i++ {
			c := line[i]
			prevBlank := i == 0 || line[i-1] == ' ' || line[i-1] == '\t'
			switch {
			case quote == 0 && c == '#' && prevBlank:
				out.Write(line[i:]) // a comment: copied as written
				i = len(line)
				continue
			case quote == 0 && (c == '"' || c == '\'') && (prevBlank || strings.IndexByte("[{,:", line[i-1]) >= 0):
				quote = c
			case quote == '"' && c == '\\' && i+1 < len(line):
				out.Write(line[i : i+2])
				i++
				continue
			case quote == '\'' && c == '\'' && i+1 < len(line) && line[i+1] == '\'':
				out.WriteString("''")
				i++
				continue
			case quote != 0 && c == quote:
				quote = 0
			case c == '$' && bytes.HasPrefix(line[i:], []byte("$${")):
				out.WriteString("${")
				i += 2
				continue
			case c == '$' && bytes.HasPrefix(line[i:], []byte("${")):
				col := out.Len() - start + 1
				end := bytes.IndexByte(line[i:], '}')
				if end < 0 {
					refs = append(refs, envRef{lineNo, col, fmt.Sprintf("%q has no closing }", string(line[i:]))})
					out.Write(line[i:])
					i = len(line)
					continue
				}
				ref := string(line[i : i+end+1])
				value, msg := lookup(ref, getenv)
				if msg != "" {
					refs = append(refs, envRef{lineNo, col, msg})
				}
				out.WriteString(value)
				i += end
				continue
			}
			out.WriteByte(c)
		}
		if nl {
			out.WriteByte('\n')
		}
	}
	return out.Bytes(), refs
}

// lookup resolves one ${NAME} or ${NAME:-default} reference.
func lookup(ref string, getenv func(string) string) (string, string) {
	inner := ref[2 : len(ref)-1]
	name, def, hasDef := strings.Cut(inner, ":-")
	if !isEnvName(name) {
		return ref, fmt.Sprintf("%q is not a variable name (use ${NAME} or ${NAME:-default})", name)
	}
	v := getenv(name)
	if v == "" {
		if !hasDef {
			return "", fmt.Sprintf("${%s} is not set and has no default (write ${%s:-default} for one)", name, name)
		}
		v = def
	}
	if strings.ContainsAny(v, "\r\n") {
		return "", fmt.Sprintf("${%s} holds a line break; only one-line values can be expanded", name)
	}
	return v, ""
}

func isEnvName(s string) bool {
	if s == "" || s[0] >= '0' && s[0] <= '9' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}
