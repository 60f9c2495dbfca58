package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"golang.org/x/net/http/httpguts"

	"github.com/idemgate/idemgate/config/internal/strictyaml"
	"github.com/idemgate/idemgate/middleware/auth"
	"github.com/idemgate/idemgate/workers"
)

// emptySHA256 is the SHA-256 of no bytes: a hash of an empty token.
const emptySHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

type badFunc func(key, format string, args ...any)

// validate checks the defaulted configuration and returns every problem,
// each an Error with Key and Message, joined.
func (c *Config) validate(o *options) error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, Error{Key: key, Message: fmt.Sprintf(format, args...)})
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
	if c.Admin.MaxAuthFailures < -1 {
		bad("admin.max_auth_failures", "must be positive, or -1 to refuse no peer, not %d", c.Admin.MaxAuthFailures)
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
	if c.DatabaseDirectURL != "" {
		if c.DatabaseURL == "" {
			bad("database_direct_url", "is a direct connection to database_url's database, and database_url is not set (set it here or in DATABASE_URL)")
		} else if msg := databaseURLProblem(c.DatabaseDirectURL); msg != "" {
			bad("database_direct_url", "%s", msg)
		}
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
	if f := c.Log.Flush(); f < 0 || f > MaxLogFlushInterval {
		bad("log.flush_interval", "%v: want 0 (every line written at once) up to %v", f, MaxLogFlushInterval)
	}

	switch auth.Mode(c.Auth.Mode) {
	case auth.ModeAPIKey, auth.ModeHeader, auth.ModeNone:
	default:
		bad("auth.mode", "%q is not api_key, header or none", c.Auth.Mode)
	}
	if !isToken(c.Auth.Header) {
		bad("auth.header", "%q is not a header name", c.Auth.Header)
	}
	switch c.Auth.CrossSite {
	case CrossSiteRefuse, CrossSiteAllow:
	default:
		bad("auth.cross_site", "%q is neither %s nor %s", c.Auth.CrossSite, CrossSiteRefuse, CrossSiteAllow)
	}
	c.validateTenants(bad)

	validateIdempotency("idempotency", c.Idempotency.Config, func(string) bool { return true }, bad)
	c.Idempotency.Memory.validate(bad)

	nonNegative(bad, "janitor.interval", c.Janitor.Interval)
	nonNegative(bad, "janitor.batch", c.Janitor.Batch)
	c.validateRetention(bad)
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
	nonNegative(bad, "server.max_in_flight", c.Server.MaxInFlight)
	switch {
	case c.Server.DrainDelay < 0:
		bad("server.drain_delay", "must be 0s or more, not %v", c.Server.DrainDelay)
	case c.Server.ShutdownTimeout > 0 && c.Server.DrainDelay >= c.Server.ShutdownTimeout:
		bad("server.drain_delay", "%v must be shorter than server.shutdown_timeout (%v), which bounds the whole shutdown: the drain delay and then the requests still in flight",
			c.Server.DrainDelay, c.Server.ShutdownTimeout)
	}

	c.validateJobsAPI(bad)
	c.validateBatches(bad)
	c.validateRedisWait(bad)
	c.validateWorker(bad)
	c.validateLimits(bad)
	c.validateFairness(bad)
	c.validateBroker(bad)
	c.validateJobs(bad, o)
	c.validateSchedules(bad)
	c.validateRoutes(bad)
	c.validateTLS(bad, o)
	return errors.Join(errs...)
}

// nonNegative reports a negative number; zero was replaced by the default.
func nonNegative[T int | time.Duration](bad badFunc, key string, v T) {
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
	if c.Auth.Mode != string(auth.ModeNone) && len(c.Tenants) == 0 {
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
		case t.Name == auth.Anonymous:
			bad(p+".name", "%q is reserved for the tenant of auth.mode none", auth.Anonymous)
		default:
			distinct(bad, names, "tenants", i, "name", t.Name)
		}
		if c.Auth.Mode == string(auth.ModeAPIKey) && len(t.APIKeySHA256) == 0 {
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
		// ratelimit.Validate has the same rule but names no field.
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

// validateWorker checks the worker's settings with the workers' own rule,
// then those only the configuration has.
func (c *Config) validateWorker(bad badFunc) {
	fields, others := split[*workers.FieldError](c.Worker.Validate())
	for _, e := range fields {
		key := "worker." + e.Field
		if e.Queue != "" {
			key = strictyaml.Join(key, e.Queue)
		}
		bad(key, "%s", e.Message)
	}
	for _, err := range others {
		bad("worker", "%v", err)
	}
	// An inherited token was checked as admin_token_sha256.
	if c.Worker.AdminTokenSHA256 != "" && c.Worker.AdminTokenSHA256 != c.AdminTokenSHA256 {
		if msg := sha256Problem(c.Worker.AdminTokenSHA256); msg != "" {
			bad("worker.admin_token_sha256", "%s", msg)
		}
	}
	// Zero is refused, not defaulted: the relay is what delivers a job
	// whose task the queue lost, and it cannot be turned off.
	positive(bad, "worker.requeue_after", c.Worker.RequeueAfter)
	positive(bad, "worker.requeue_interval", c.Worker.RequeueInterval)
}

// distinct reports entry i of list when an earlier entry has the same
// value in field, a value that must name one entry; first maps each value
// to the entry that had it first.
func distinct(bad badFunc, first map[string]int, list string, i int, field, value string) {
	if j, dup := first[value]; dup {
		bad(fmt.Sprintf("%s[%d].%s", list, i, field), "%q is also the %s of %s[%d]", value, field, list, j)
		return
	}
	first[value] = i
}

// positive reports a number that is not above zero.
func positive(bad badFunc, key string, v time.Duration) {
	if v <= 0 {
		bad(key, "must be positive, not %v", v)
	}
}

// split lists the problems a library's Validate joined: those of type E,
// which name the field they are about, and any others.
func split[E error](err error) (fields []E, others []error) {
	if err == nil {
		return nil, nil
	}
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	for _, e := range errs {
		if fe, ok := errors.AsType[E](e); ok {
			fields = append(fields, fe)
		} else {
			others = append(others, e)
		}
	}
	return fields, others
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
			distinct(bad, names, "routes", i, "name", r.Name)
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

		d := r.Idempotency
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
			queueErr := workers.CheckQueueName(e.Queue)
			switch {
			case e.queueFromJob:
			case queueErr != nil:
				bad(p+".enqueue.queue", "%v", queueErr)
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
		switch r.MethodOverride {
		case "", MethodOverrideRefuse, MethodOverrideHonour:
		default:
			bad(p+".method_override", "%q is neither %s nor %s", r.MethodOverride, MethodOverrideRefuse, MethodOverrideHonour)
		}
		validateIdempotency(p+".idempotency", d, func(key string) bool { return r.overrides[key] }, bad)
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
			return pgParseProblem(s) // key=value connection string
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
	return pgParseProblem(s)
}

// pgParseProblem is what pgxpool, which opens the pool at start-up, finds
// wrong with a connection string (a port that is not a number, an unknown
// sslmode, a bad timeout), without the connection string itself.
func pgParseProblem(s string) string {
	_, err := pgxpool.ParseConfig(s)
	if err == nil {
		return ""
	}
	var pe *pgconn.ParseConfigError
	if !errors.As(err, &pe) {
		return "is not a connection string pgx can read"
	}
	// pgx's text is "cannot parse `<the string, passwords masked>`: <msg>
	// (<cause>)"; only msg and the cause are kept, and a URL's parse error
	// loses the URL it quotes.
	text, cause := pe.Error(), pe.Unwrap()
	if cause != nil {
		text = strings.TrimSuffix(text, " ("+cause.Error()+")")
	}
	msg := text[strings.LastIndex(text, "`: ")+len("`: "):]
	if cause != nil {
		var ue *url.Error
		if errors.As(cause, &ue) {
			cause = ue.Err
		}
		msg += " (" + cause.Error() + ")"
	}
	return msg
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
		if strings.Contains(u.Host, ",") {
			// go-redis would read "h1:7000,h2:7001,h3" as one host name.
			return "a Redis Cluster is the comma list of its nodes without a scheme, path or parameters (h1:7000,h2:7001,h3:7002), not a redis:// URL"
		}
		return redisOptionsProblem(s, u)
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

// redisOptionsProblem is what go-redis finds wrong with a redis:// or
// rediss:// URL's path and parameters, read as the clients will read it:
// with master_name, the failover form, whose hosts are sentinels.
func redisOptionsProblem(s string, u *url.URL) string {
	q := u.Query()
	for _, p := range []string{"sentinel_password", "sentinel_username"} {
		if q.Has(p) {
			return fmt.Sprintf("%s is not a parameter: the sentinels' user and password go in the URL's user info (redis://user:password@sentinel:26379/0?master_name=…), the master's in username= and password=", p)
		}
	}
	var err error
	switch {
	case q.Has("master_name"):
		if q.Get("master_name") == "" {
			return "master_name is empty: name the master the sentinels monitor"
		}
		if u.Port() == "" {
			// go-redis would try 6379, a data node's port.
			return fmt.Sprintf("the sentinel %q has no port (sentinels usually listen on 26379)", u.Hostname())
		}
		for _, a := range q["addr"] {
			if host, port, err := net.SplitHostPort(a); err != nil || host == "" || port == "" {
				return fmt.Sprintf("addr %q is not a sentinel's host:port", a)
			}
		}
		_, err = redis.ParseFailoverURL(s)
	case q.Has("addr"):
		return "addr lists more sentinels, which needs master_name=NAME, the master the sentinels monitor"
	default:
		_, err = redis.ParseURL(s)
	}
	if err != nil {
		msg := strings.TrimPrefix(err.Error(), "redis: ")
		if names, ok := strings.CutPrefix(msg, "unexpected option: "); ok {
			return "unknown parameter " + names
		}
		return msg
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

// isToken reports whether s is an RFC 9110 token: a method or header name.
func isToken(s string) bool { return httpguts.ValidHeaderFieldName(s) }

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
