package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	chimiddleware "github.com/go-chi/chi/v5/middleware"

	"github.com/idemgate/idemgate/middleware/auth"
	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/middleware/ratelimit"
	"github.com/idemgate/idemgate/openapi"
	"github.com/idemgate/idemgate/problem"
	"github.com/idemgate/idemgate/telemetry"
)

// Options is everything the gateway is built from. cmd/idemgate fills it
// from the configuration file; tests fill it directly.
type Options struct {
	// ProblemBase prefixes every problem type. Default
	// problem.DefaultBase.
	ProblemBase string
	Auth        auth.Config
	// RateLimits per tenant; a tenant without one is not limited.
	RateLimits ratelimit.Limits
	// RateLimitStore makes the store of each distinct limit. Default
	// ratelimit.MemoryStore (per instance).
	RateLimitStore ratelimit.StoreFunc
	Routes         []RouteOptions
	Transport      http.RoundTripper
	// Store keeps idempotency records; StoreName labels its metrics.
	Store     idempotency.Store
	StoreName string
	// ReplayCache, when set, answers replays of recently completed records
	// from memory; the admin API's deletes forget them.
	ReplayCache *idempotency.ReplayCache
	// Ready are the checks behind /readyz.
	Ready []Check
	// AdminTokenSHA256 is the hex SHA-256 of the admin bearer token.
	AdminTokenSHA256 string
	// Jobs accepts and shows jobs; required when a route enqueues.
	Jobs Submitter
	// JobWatcher wakes the GET /v1/jobs/{id}?wait= that wait on a job's
	// change. Nil: such a GET answers at once, as without wait.
	JobWatcher JobWatcher
	// MaxWait caps GET /v1/jobs/{id}?wait=; a longer wait is clamped to
	// it. Default DefaultMaxWait, 30s.
	MaxWait time.Duration
	// MaxWaiters bounds the GET /v1/jobs/{id}?wait= held at once, and
	// MaxWaitersPerTenant those of one tenant; a wait beyond either is
	// answered at once with HeaderWaitRefused. Held waits do not count
	// against MaxInFlight. Defaults DefaultMaxWaiters (1024) and
	// DefaultMaxWaitersPerTenant (16).
	MaxWaiters, MaxWaitersPerTenant int
	// MaxDepth bounds how deep an enqueue route's body may nest its
	// arrays and objects; a deeper one is refused with 422
	// invalid-payload. Default job.DefaultMaxDepth, 64.
	MaxDepth int
	// RequireItemKeys refuses a batch item without its own
	// idempotency_key (400) instead of keying it by the batch's key and
	// its index. Default false.
	RequireItemKeys bool
	// Explainer tells the story of a job or a key at the admin API's
	// …/explain endpoints; nil leaves them out (404).
	Explainer Explainer
	// Schedules serves the recurring schedules' endpoints; nil answers
	// them 404.
	Schedules *ScheduleOptions
	// Limits reads the flow limits for GET /admin/limits/{name}; nil
	// means none is declared (every name is 404).
	Limits Limits
	// Fairness reads and sets the fairness pools for GET and PUT
	// /admin/fairness/{pool}; nil means none is declared (every pool is
	// 404).
	Fairness Fairness
	// Pauses keeps the pauses of POST /admin/pause and /admin/resume
	// and GET /admin/pauses; nil when the gateway has no database (they
	// are 404 then).
	Pauses Pauses
	// Actions keeps the audit trail of operators' actions (a
	// *job.Store); nil when the gateway has no database: actions are
	// then logged and counted only.
	Actions ActionRecorder
	// AdminMaxAuthFailures is how many wrong admin tokens one peer may
	// send within a minute before the admin listener refuses it for a
	// minute (AdminGuard). Default DefaultAdminMaxAuthFailures, 10. The
	// special value -1 never refuses a peer; refusals are still counted
	// and logged.
	AdminMaxAuthFailures int
	// Pprof mounts net/http/pprof at /debug/pprof/ on the admin listener.
	Pprof bool
	// OpenAPI is served at /openapi.yaml, OpenAPIJSON at /openapi.json.
	OpenAPI     []byte
	OpenAPIJSON []byte
	Logger      *slog.Logger
	Metrics     *Metrics
	// MaxInFlight is the most requests the public listener handles at
	// once; beyond it a request is shed with 503 (see shedOverload).
	// 0: no limit.
	MaxInFlight int
	// RefuseCrossSite refuses, with 403 forbidden, a state-changing
	// request to the public listener that a browser sent from another
	// site (see refuseCrossOrigin): in auth mode header, a proxy that
	// names the tenant from a cookie would otherwise act for a cross-site
	// form. Default false.
	RefuseCrossSite bool
}

// RouteOptions is one configured route.
type RouteOptions struct {
	Name    string
	Methods []string // empty: every method
	Path    string
	Prefix  bool
	// Upstream is where a proxied route forwards; Timeout bounds the call.
	Upstream *url.URL
	Timeout  time.Duration
	// Transport, when set, carries this route's upstream calls instead of
	// Options.Transport (an upstream with its own TLS settings).
	Transport http.RoundTripper
	// Enqueue makes the route an enqueue route.
	Enqueue *EnqueueOptions
	// Handler serves a route that is neither proxied nor enqueued.
	Handler     http.Handler
	Idempotency idempotency.Config
	// HonourMethodOverride serves a request that names another method in
	// X-HTTP-Method-Override, X-HTTP-Method or X-Method-Override as that
	// method, and forwards the header. Default false: such a request is
	// refused with 400 method-override-refused, so it never reaches an
	// upstream that would run the named method unprotected.
	HonourMethodOverride bool
}

// Check is one dependency /readyz verifies.
type Check struct {
	Name  string
	Check func(context.Context) error
}

// Gateway is the built gateway: its public and admin handlers.
type Gateway struct {
	opts     Options
	problems problem.Writer
	auth     *auth.Authenticator
	limiter  *ratelimit.Limiter
	table    table
	admin    [sha256.Size]byte
	// adminGuard throttles admin token guessing on the admin listener.
	adminGuard *AdminGuard
	// audit records operators' actions (Audit).
	audit   *Audit
	public  http.Handler
	private http.Handler
	// publicMux and adminMux are the routers of the gateway's own
	// endpoints; mounts are the prefixes AdminMount added.
	publicMux, adminMux chi.Routes
	mounts              []string
	// guards are the routes' idempotency middlewares, drained by Close.
	guards []*idempotency.Middleware
	// draining is set by StartDraining, which also closes drained once.
	draining  atomic.Bool
	drained   chan struct{}
	drainOnce sync.Once
	// inFlight counts the public requests being handled (shedOverload).
	inFlight atomic.Int64
	// waiters counts the job waits held (admitWait).
	waiters *waiters
	// recent counts the requests of each tenant and route over the last
	// minutes, for the operator console.
	recent *RecentRequests
	// history is the last requests of each idempotency key (the console's key page).
	history *KeyHistory
	// counts adds how many requests each key received to the store, when
	// it keeps them (keycounts.go); nil when it does not.
	counts *keyCounts
}

// New builds the whole middleware chain once, validating as it goes.
func New(opts Options) (*Gateway, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics()
	}
	if opts.ProblemBase == "" {
		opts.ProblemBase = problem.DefaultBase
	}
	if opts.RateLimitStore == nil {
		opts.RateLimitStore = ratelimit.MemoryStore
	}
	if opts.Transport == nil {
		opts.Transport = http.DefaultTransport
	}
	if opts.Store == nil {
		return nil, errors.New("gateway: no idempotency store")
	}
	if opts.MaxWait <= 0 {
		opts.MaxWait = DefaultMaxWait
	}
	if opts.MaxWaiters <= 0 {
		opts.MaxWaiters = DefaultMaxWaiters
	}
	if opts.MaxWaitersPerTenant <= 0 {
		opts.MaxWaitersPerTenant = DefaultMaxWaitersPerTenant
	}
	g := &Gateway{opts: opts, problems: NewProblemWriter(opts.ProblemBase, opts.Logger), drained: make(chan struct{}),
		recent: NewRecentRequests(nil), history: NewKeyHistory(), waiters: newWaiters(opts.MaxWaiters, opts.MaxWaitersPerTenant)}
	g.adminGuard = newAdminGuard(opts.AdminMaxAuthFailures, opts.Metrics.adminAuthFailures, opts.Logger)
	g.audit = &Audit{store: opts.Actions, logger: opts.Logger, actions: opts.Metrics.adminActions}
	if opts.AdminTokenSHA256 != "" {
		b, err := hex.DecodeString(opts.AdminTokenSHA256)
		if err != nil || len(b) != sha256.Size {
			return nil, errors.New("gateway: admin_token_sha256 is not a hex SHA-256")
		}
		copy(g.admin[:], b)
	}
	var err error
	if g.auth, err = auth.New(opts.Auth); err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	if g.auth.Mode() == auth.ModeAPIKey {
		// In header mode a trusted proxy names the tenant: the client has
		// no credentials to send, so there is nothing to challenge it for.
		g.problems.Challenge = `Bearer realm="idemgate"`
	}
	g.limiter, err = ratelimit.New(opts.RateLimits, opts.RateLimitStore, ratelimit.Config{
		Key: func(r *http.Request) string { return auth.Tenant(r.Context()) },
		OnLimited: func(w http.ResponseWriter, r *http.Request, err error) {
			infoFrom(r.Context()).outcome = "rate_limited"
			g.problems.Write(w, r, err)
		},
		OnError: func(r *http.Request, err error) {
			opts.Logger.WarnContext(r.Context(), "rate limit store failed; request let through", "err", err)
		},
		Timeout: 100 * time.Millisecond,
	})
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	opts.Metrics.memoryStore.watch(opts.Store)
	store := newTimedStore(opts.Store, opts.StoreName, opts.Metrics.store)
	var routes []*route
	for _, ro := range opts.Routes {
		rt, err := g.buildRoute(ro, store)
		if err != nil {
			return nil, fmt.Errorf("gateway: route %s: %w", ro.Name, err)
		}
		routes = append(routes, rt)
		if ro.Enqueue != nil && ro.Enqueue.Batch != nil {
			brt, err := g.buildBatchRoute(ro, g.guards[len(g.guards)-1], store)
			if err != nil {
				return nil, fmt.Errorf("gateway: route %s: batch: %w", ro.Name, err)
			}
			routes = append(routes, brt)
		}
	}
	g.table = newTable(routes)
	g.counts = newKeyCounts(opts.Store, opts.Logger)
	g.public = g.publicRoutes()
	g.private = g.adminRoutes()
	g.counts.start()
	return g, nil
}

// Close waits, until ctx ends, for the idempotency outcomes still being
// stored in the background (idempotency.Middleware.Drain), adds the
// request counts it holds to the store, then releases the rate limiter's
// stores. Call it after the listeners have shut down.
func (g *Gateway) Close(ctx context.Context) error {
	var errs []error
	for _, mw := range g.guards {
		errs = append(errs, mw.Drain(ctx))
	}
	errs = append(errs, g.counts.close(ctx))
	errs = append(errs, g.limiter.Close(ctx))
	return errors.Join(errs...)
}

// Recent is the count of the requests of each tenant and route over the
// last RecentWindow (the operator console's overview).
func (g *Gateway) Recent() *RecentRequests { return g.recent }

// KeyHistory is the last requests each idempotency key received at this
// instance.
func (g *Gateway) KeyHistory() *KeyHistory { return g.history }

// Handler serves the public listener.
func (g *Gateway) Handler() http.Handler { return g.public }

// AdminHandler serves the admin listener.
func (g *Gateway) AdminHandler() http.Handler { return g.private }

func (g *Gateway) buildRoute(ro RouteOptions, store idempotency.Store) (*route, error) {
	rt := &route{name: ro.Name, path: ro.Path, prefix: ro.Prefix, honourOverride: ro.HonourMethodOverride}
	if len(ro.Methods) > 0 {
		rt.methods = map[string]bool{}
		for _, m := range ro.Methods {
			rt.methods[strings.ToUpper(m)] = true
		}
	}
	ic := ro.Idempotency
	ic.Route = ro.Name
	ic.Tenant = func(r *http.Request) string { return auth.Tenant(r.Context()) }
	ic.ErrorHandler = g.problems.Write
	ic.ReplayCache = g.opts.ReplayCache
	ic.Observe = observeIdempotency
	ic.Logger = g.opts.Logger
	if ro.Enqueue != nil {
		ic.Fingerprint.HeadersIfPresent = scheduleHeaders(ic.Fingerprint.HeadersIfPresent)
	}
	mw, err := idempotency.New(store, ic)
	if err != nil {
		return nil, err
	}
	g.guards = append(g.guards, mw)
	var h http.Handler
	switch {
	case ro.Enqueue != nil:
		if g.opts.Jobs == nil {
			return nil, errors.New("an enqueue route needs the job queue")
		}
		if ro.Enqueue.Spec == nil {
			return nil, errors.New("an enqueue route needs its declared job")
		}
		rt.kind = KindEnqueue
		h = g.handleEnqueue(ro.Name, *ro.Enqueue, mw.Config().CommitTimeout)
	case ro.Handler != nil:
		rt.kind = KindHandler
		h = ro.Handler
	case ro.Upstream != nil:
		rt.kind = KindProxy
		strip := ""
		if g.auth.Mode() == auth.ModeAPIKey {
			strip = g.auth.Header()
		}
		transport := g.opts.Transport
		if ro.Transport != nil {
			transport = ro.Transport
		}
		h = timedUpstream(g.opts.Metrics, ro.Name, newProxy(ro.Upstream, transport, ro.Timeout, strip, mw.Config(), g.problems))
	default:
		return nil, errors.New("neither an upstream nor a handler")
	}
	h = mw.Wrap(h)
	h = g.tenantChain(h)
	name := ro.Name
	rt.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		infoFrom(r.Context()).route = name
		telemetry.SetRoute(r, name)
		h.ServeHTTP(w, r)
	})
	return rt, nil
}

// tenantChain is what every tenant's request passes before its handler:
// authentication, then the tenant's rate limit. The configured routes and
// the job endpoints share it, so that a tenant's reads and cancels spend
// the same budget as its writes.
func (g *Gateway) tenantChain(next http.Handler) http.Handler {
	return g.authenticate(g.limiter.Wrap(next))
}

// authenticate lets through only requests with valid credentials, noting
// their tenant on the request (auth.Tenant) and for the access log.
func (g *Gateway) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tenant, err := g.auth.Authenticate(r)
		if err != nil {
			infoFrom(r.Context()).outcome = "unauthorized"
			g.problems.Write(w, r, err)
			return
		}
		next.ServeHTTP(w, authenticated(r, tenant))
	})
}

// publicRoutes lists the whole public API.
func (g *Gateway) publicRoutes() http.Handler {
	r := chi.NewRouter()
	r.Use(chimiddleware.GetHead)
	r.Get("/healthz", g.handleHealth())
	r.Get("/readyz", g.handleReady())
	r.Get("/openapi.yaml", g.handleOpenAPI("application/yaml", g.opts.OpenAPI))
	r.Get("/openapi.json", g.handleOpenAPI("application/json", g.opts.OpenAPIJSON))
	r.Method(http.MethodGet, "/v1/jobs", g.handleJobList())
	r.Method(http.MethodGet, "/v1/jobs/{id}", g.handleJobGet())
	r.Method(http.MethodPost, "/v1/jobs/{id}/cancel", g.handleJobCancel())
	r.Method(http.MethodGet, "/v1/batches/{id}", g.handleBatchGet())
	g.scheduleRoutes(r)
	r.NotFound(g.handleTable())
	r.MethodNotAllowed(g.handleTable())
	g.publicMux = r
	var h http.Handler = r
	if g.opts.RefuseCrossSite {
		h = g.refuseCrossOrigin(h, true, "a state-changing request from another site is refused (auth.cross_site: refuse); send it from a page of the same site, or without a browser")
	}
	h = accessLog(g.opts.Logger, g.opts.Metrics, g.recent, g.history, g.counts, h)
	h = g.recoverPanics(h)
	h = g.closeWhileDraining(h)
	h = g.shedOverload(h)
	return withRequestState(h)
}

// handleTable serves every request that is not one of the gateway's own
// endpoints: the longest matching route, or 404.
func (g *Gateway) handleTable() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		path, err := routePath(r.URL)
		if err != nil {
			g.problems.Write(w, r, &problem.Error{Err: ErrBadRequest, Detail: err.Error()})
			return
		}
		if method, ok := methodOverride(r.Header); ok {
			g.routeOverridden(w, r, path, method)
			return
		}
		rt := g.table.match(r.Method, path)
		if rt == nil {
			g.problems.Write(w, r, &problem.Error{Err: ErrNotFound, Detail: "no route matches " + r.Method + " " + r.URL.Path})
			return
		}
		rt.handler.ServeHTTP(w, r)
	}
}

func (g *Gateway) recoverPanics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v == http.ErrAbortHandler {
				panic(v) // the connection is to be dropped: let net/http do it
			}
			g.problems.Write(w, r, fmt.Errorf("panic: %v", v))
		}()
		next.ServeHTTP(w, r)
	})
}

func (g *Gateway) handleHealth() http.HandlerFunc {
	body := compactJSON(openapi.Health{Status: openapi.HealthStatusOk})
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	}
}

func (g *Gateway) handleReady() http.HandlerFunc {
	body := compactJSON(openapi.Readiness{Status: openapi.ReadinessStatusReady})
	return func(w http.ResponseWriter, r *http.Request) {
		if g.Draining() {
			// Not a failure: no check runs and nothing is logged.
			g.problems.Write(w, r, &problem.Error{Err: ErrNotReady, Detail: "draining: the gateway is shutting down", RetryAfter: time.Second})
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		var failed []string
		for _, c := range g.opts.Ready {
			if err := c.Check(ctx); err != nil {
				g.opts.Logger.WarnContext(ctx, "readiness check failed", "check", c.Name, "err", err)
				failed = append(failed, c.Name)
			}
		}
		if len(failed) > 0 {
			g.problems.Write(w, r, &problem.Error{Err: ErrNotReady, Detail: "unreachable: " + strings.Join(failed, ", "), RetryAfter: time.Second})
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	}
}

// compactJSON is v on one line, as /healthz and /readyz answer.
func compactJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic("gateway: " + err.Error())
	}
	return append(b, '\n')
}

func (g *Gateway) handleOpenAPI(contentType string, doc []byte) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", contentType)
		_, _ = w.Write(doc)
	}
}

// AdminChallenge is the WWW-Authenticate of a refused request to an admin
// endpoint that programs call.
const AdminChallenge = `Bearer realm="idemgate-admin"`

// requireAdmin lets through the requests that carry the admin token.
func (g *Gateway) requireAdmin(next http.Handler) http.Handler {
	return g.requireAdminToken(next, AdminChallenge)
}

// requireAdminToken is RequireAdminToken with the gateway's token and
// problem writer; challenge is the WWW-Authenticate of a refusal.
func (g *Gateway) requireAdminToken(next http.Handler, challenge string) http.Handler {
	return RequireAdminToken(next, g.admin, challenge, "the admin API needs the admin bearer token", g.problems, g.adminGuard)
}

// RequireAdminToken lets through the requests that carry the admin token
// whose SHA-256 is want (auth.AdminToken: a bearer token, or the password
// of HTTP Basic authentication so that a browser can reach an admin page)
// and answers any other 401, with challenge as WWW-Authenticate and a
// problem document, written by problems, whose detail is detail. guard
// counts the refusals and answers a peer that sent too many wrong tokens
// 429 without comparing its token (AdminGuard); a nil guard counts
// nothing and refuses no peer. It guards the gateway's
// admin listener and the worker's.
func RequireAdminToken(next http.Handler, want [sha256.Size]byte, challenge, detail string, problems problem.Writer, guard *AdminGuard) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if d := guard.throttled(r); d > 0 {
			problems.Write(w, r, tooManyFailures(d))
			return
		}
		if !auth.AdminToken(r, want) {
			guard.refused(r)
			w.Header().Set("WWW-Authenticate", challenge)
			problems.Write(w, r, &problem.Error{Err: auth.ErrUnauthorized, Detail: detail})
			return
		}
		next.ServeHTTP(w, r)
	})
}
