package gateway

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/pprof"
	"net/url"
	"time"

	"github.com/go-chi/chi/v5"
	chimiddleware "github.com/go-chi/chi/v5/middleware"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/idemgate/idemgate/internal/explain"
	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/middleware/requestid"
	"github.com/idemgate/idemgate/openapi"
	"github.com/idemgate/idemgate/problem"
)

// adminRoutes lists the whole admin API. Everything needs the admin token.
func (g *Gateway) adminRoutes() http.Handler {
	r := chi.NewRouter()
	r.Use(RouteEscaped, g.requireAdmin, chimiddleware.GetHead)
	r.Method(http.MethodGet, "/metrics", promhttp.HandlerFor(g.opts.Metrics.Registry, promhttp.HandlerOpts{}))
	r.With(g.storableScope).Get("/admin/keys/{tenant}/{route}/{key}", g.handleKeyGet())
	r.With(g.storableScope).Delete("/admin/keys/{tenant}/{route}/{key}", g.handleKeyDelete())
	r.With(g.storableScope).Post("/admin/keys/{tenant}/{route}/{key}/resolve", g.handleKeyResolve())
	r.Get("/admin/jobs", g.handleAdminJobList())
	r.Post("/admin/jobs/cancel", g.handleAdminJobsCancel())
	r.Post("/admin/jobs/{id}/cancel", g.handleAdminJobCancel())
	if g.opts.Explainer != nil {
		r.With(g.storableScope).Get("/admin/keys/{tenant}/{route}/{key}/explain", g.handleKeyExplain())
		r.Get("/admin/jobs/{id}/explain", g.handleJobExplain())
	}
	r.Post("/admin/schedules/{id}/backfill", g.handleScheduleBackfill())
	r.Get("/admin/limits/{name}", g.handleLimitGet())
	r.Post("/admin/pause", g.handlePause())
	r.Post("/admin/resume", g.handleResume())
	r.Get("/admin/pauses", g.handlePauseList())
	r.Get("/admin/fairness/{pool}", g.handleFairnessGet())
	r.Put("/admin/fairness/{pool}", g.handleFairnessPut())
	if g.opts.Pprof {
		r.HandleFunc(pprofPrefix+"*", pprof.Index)
		r.HandleFunc(pprofPrefix+"cmdline", pprof.Cmdline)
		r.HandleFunc(pprofPrefix+"profile", pprof.Profile)
		r.HandleFunc(pprofPrefix+"symbol", pprof.Symbol)
		r.HandleFunc(pprofPrefix+"trace", pprof.Trace)
	}
	notFound := func(w http.ResponseWriter, r *http.Request) {
		g.problems.Write(w, r, &problem.Error{Err: ErrNotFound, Detail: "no admin endpoint " + r.Method + " " + r.URL.Path})
	}
	r.NotFound(notFound)
	r.MethodNotAllowed(notFound)
	g.adminMux = r
	return requestid.Middleware(g.sameOrigin(g.recoverPanics(r)))
}

// sameOrigin refuses a state-changing admin request that a browser sent
// from another origin, same-site ones included: the admin token may be
// HTTP Basic credentials a browser remembers and adds to a cross-site
// form's POST by itself. The queue UI's own requests are same-origin.
func (g *Gateway) sameOrigin(next http.Handler) http.Handler {
	return g.refuseCrossOrigin(next, false,
		"a state-changing request to the admin listener from another origin is refused; send it from the admin listener's own origin, or without a browser")
}

// refuseCrossOrigin refuses, with 403 forbidden and detail, a
// state-changing request that a browser sent from another origin
// (http.CrossOriginProtection: Sec-Fetch-Site, else Origin against Host).
// With sameSite, a request whose Sec-Fetch-Site is same-site (a page on
// another host of the same registrable domain) goes through too. Safe
// methods, same-origin requests and requests with neither header (the
// CLI, curl, SDKs, servers) always go through. It guards the admin
// listener and, with Options.RefuseCrossSite, the public one.
func (g *Gateway) refuseCrossOrigin(next http.Handler, sameSite bool, detail string) http.Handler {
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.problems.Write(w, r, &problem.Error{Err: ErrForbidden, Detail: detail})
	}))
	guarded := cop.Handler(next)
	if !sameSite {
		return guarded
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Sec-Fetch-Site") == "same-site" {
			next.ServeHTTP(w, r)
			return
		}
		guarded.ServeHTTP(w, r)
	})
}

// RouteEscaped makes chi match the path as it was sent, so that PathParam
// decodes each segment exactly once (the admin API and the console use it). chi matches RawPath when it is set
// and the decoded Path otherwise, and net/url leaves RawPath empty when
// the default encoding gives the path back: "pct%2541" (the key pct%41)
// reached chi as "pct%41" and was decoded again, to pctA.
func RouteEscaped(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if rctx := chi.RouteContext(r.Context()); rctx != nil && rctx.RoutePath == "" {
			rctx.RoutePath = r.URL.EscapedPath()
		}
		next.ServeHTTP(w, r)
	})
}

// pprofPrefix is where net/http/pprof is mounted when Options.Pprof is set.
const pprofPrefix = "/debug/pprof/"

// AdminMount adds h under prefix on the admin listener, behind the admin
// token (asynqmon is mounted this way). A refusal asks for HTTP Basic
// authentication, so that a browser prompts: the token is the password,
// the user name is not checked.
func (g *Gateway) AdminMount(prefix string, h http.Handler) {
	g.mounts = append(g.mounts, prefix)
	inner := g.private
	authed := g.sameOrigin(g.requireAdminToken(h, `Basic realm="idemgate-admin", charset="UTF-8"`))
	g.private = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == prefix || len(r.URL.Path) > len(prefix) && r.URL.Path[:len(prefix)+1] == prefix+"/" {
			authed.ServeHTTP(w, r)
			return
		}
		inner.ServeHTTP(w, r)
	})
}

// scopeOf reads the record's scope from the path. chi matches the path as
// sent (RouteEscaped), so each segment — a key may hold "/" or "%" — is
// percent-decoded here, once.
func scopeOf(r *http.Request) idempotency.Scope {
	return idempotency.Scope{Tenant: PathParam(r, "tenant"), Route: PathParam(r, "route"), Key: PathParam(r, "key")}
}

// PathParam is the chi URL parameter name of a route matched as sent
// (RouteEscaped), percent-decoded once; a segment that does not decode is
// returned as it is.
func PathParam(r *http.Request, name string) string {
	v := chi.URLParam(r, name)
	if u, err := url.PathUnescape(v); err == nil {
		return u
	}
	return v
}

// NewRecordDocument is how the admin API and `idemgate keys get` show a
// record: the IdempotencyRecord of openapi.yaml, the stored body in base64.
// It is made in internal/explain, which the gateway imports, because a
// story's record is derived from the same document.
func NewRecordDocument(rec idempotency.Record) openapi.IdempotencyRecord {
	return explain.RecordDocument(rec)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func (g *Gateway) storeError(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, idempotency.ErrNotFound):
		g.problems.Write(w, r, &problem.Error{Err: ErrNotFound, Detail: "no idempotency record for this tenant, route and key"})
	case errors.Is(err, idempotency.ErrNotUnknown):
		g.problems.Write(w, r, &problem.Error{Err: ErrBadRequest, Detail: "only a record whose outcome is unknown can be resolved; delete it instead"})
	default:
		g.problems.Write(w, r, &problem.Error{Err: idempotency.ErrStoreUnavailable, Detail: "the idempotency store is unavailable", RetryAfter: time.Second, Cause: err})
	}
}

func (g *Gateway) handleKeyGet() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		rec, err := g.opts.Store.Get(r.Context(), scopeOf(r))
		if err != nil {
			g.storeError(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, NewRecordDocument(rec))
	}
}

func (g *Gateway) handleKeyDelete() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		scope := scopeOf(r)
		reason, err := actionReason(r)
		if err != nil {
			g.problems.Write(w, r, err)
			return
		}
		if _, err := g.opts.Store.Get(r.Context(), scope); err != nil {
			g.storeError(w, r, err)
			return
		}
		if err := g.opts.Store.Delete(r.Context(), scope); err != nil {
			g.storeError(w, r, err)
			return
		}
		g.opts.ReplayCache.Forget(scope)
		g.opts.Logger.InfoContext(r.Context(), "idempotency record deleted by an operator", "tenant", scope.Tenant, "route", scope.Route, "idempotency_key", scope.Key)
		_, _ = g.audit.Record(r.Context(), r, job.Action{Action: "delete-key", Via: "api", Tenant: scope.Tenant, Route: scope.Route, Key: scope.Key, Reason: reason})
		w.WriteHeader(http.StatusNoContent)
	}
}

func (g *Gateway) handleKeyResolve() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		scope := scopeOf(r)
		reason, err := actionReason(r)
		if err != nil {
			g.problems.Write(w, r, err)
			return
		}
		if err := g.opts.Store.Resolve(r.Context(), scope); err != nil {
			g.storeError(w, r, err)
			return
		}
		g.opts.Logger.InfoContext(r.Context(), "unknown outcome released by an operator", "tenant", scope.Tenant, "route", scope.Route, "idempotency_key", scope.Key)
		_, _ = g.audit.Record(r.Context(), r, job.Action{Action: "resolve-key", Via: "api", Tenant: scope.Tenant, Route: scope.Route, Key: scope.Key, Reason: reason})
		rec, err := g.opts.Store.Get(r.Context(), scope)
		if err != nil {
			g.storeError(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, NewRecordDocument(rec))
	}
}
