package gateway

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/idemgate/idemgate/middleware/auth"
	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/middleware/requestid"
	"github.com/idemgate/idemgate/telemetry"
)

// info is what the layers of one request learn about it, for the access
// log line and the metrics written when it ends.
type info struct {
	route, tenant, key, outcome, stored, job string
	// scope is the idempotency key's scope, as the middleware claimed it.
	scope    idempotency.Scope
	token    int64
	takeOver bool
}

type infoKey struct{}

func infoFrom(ctx context.Context) *info {
	i, _ := ctx.Value(infoKey{}).(*info)
	if i == nil {
		return &info{} // outside the access log: writes go nowhere
	}
	return i
}

// requestState is the state of one public request that the gateway's own
// layers share: its id, its tenant once authenticated, and what the access
// log learns. It is the request's one context value, answering the keys of
// requestid, auth and the access log, so that those layers cost one
// request copy together instead of one each (a copy is a few hundred
// bytes, and what a request allocates sets the garbage collector's pace).
type requestState struct {
	context.Context
	// id and tenant are kept as interface values so that Value answers
	// them without boxing them again on every read.
	id, tenant any
	info       info
	// status is the access log's ResponseWriter, kept here to spare it
	// an allocation of its own.
	status statusWriter
}

func (s *requestState) Value(key any) any {
	switch key.(type) {
	case requestStateKey:
		return s
	case infoKey:
		return &s.info
	case requestid.ContextKey:
		return s.id
	case auth.ContextKey:
		if s.tenant != nil {
			return s.tenant
		}
	}
	return s.Context.Value(key)
}

// stateFrom returns the request's state, or nil outside withRequestState.
func stateFrom(ctx context.Context) *requestState {
	s, _ := ctx.Value(requestStateKey{}).(*requestState)
	return s
}

type requestStateKey struct{}

// withRequestState is the outermost layer of the public listener: it
// gives the request its id (requestid.Ensure, as requestid.Middleware
// would) and its state.
func withRequestState(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := &requestState{Context: r.Context()}
		s.id = requestid.Ensure(w, r)
		next.ServeHTTP(w, r.WithContext(s))
	})
}

// authenticated records the tenant the credentials named: on the request
// state when there is one, else (a handler used outside the public
// listener) on a copy of r. It also notes the tenant for the access log
// and the trace.
func authenticated(r *http.Request, tenant string) *http.Request {
	if s := stateFrom(r.Context()); s != nil {
		s.tenant = tenant
		s.info.tenant = tenant
	} else {
		r = r.WithContext(auth.WithTenant(r.Context(), tenant))
		infoFrom(r.Context()).tenant = tenant
	}
	if trace.SpanFromContext(r.Context()).IsRecording() {
		telemetry.SetAttrs(r.Context(), telemetry.Tenant(tenant))
	}
	return r
}

// statusWriter remembers the status for the access log.
type statusWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(p)
	w.bytes += int64(n)
	return n, err
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// accessLog writes one line per request and counts it.
func accessLog(logger *slog.Logger, m *Metrics, recent *RecentRequests, history *KeyHistory, counts *keyCounts, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		var sw *statusWriter
		var in *info
		if s := stateFrom(r.Context()); s != nil {
			in, sw = &s.info, &s.status
			sw.ResponseWriter = w
			next.ServeHTTP(sw, r)
		} else {
			in, sw = &info{}, &statusWriter{ResponseWriter: w}
			next.ServeHTTP(sw, r.WithContext(context.WithValue(r.Context(), infoKey{}, in)))
		}
		end := time.Now()
		d := end.Sub(start)
		if in.route == "" {
			return // the gateway's own endpoints are not counted as traffic
		}
		outcome := in.outcome
		if outcome == "" {
			outcome = "passthrough"
		}
		m.request(in.route, outcome, d)
		recent.observe(in.tenant, in.route, outcome, in.stored)
		if in.key != "" {
			history.observe(in.scope, outcome, in.stored, sw.status, requestid.FromContext(r.Context()), end)
			counts.observe(in.scope, outcome, in.stored, end)
		}
		if !logger.Enabled(r.Context(), slog.LevelInfo) {
			return
		}
		if in.job == "" && sw.status == http.StatusAccepted {
			// A replayed 202 names its job only in the stored Location.
			if id, ok := strings.CutPrefix(w.Header().Get("Location"), "/v1/jobs/"); ok {
				in.job = id
			}
		}
		// The line is built as a Record and handed to the handler as
		// Logger.LogAttrs would, less the caller's program counter (which
		// costs a stack walk and is only read by AddSource, which the
		// gateway's handlers leave off) and a second clock read: its time
		// is the request's end. The attributes go in an array on the stack.
		var buf [14]slog.Attr
		attrs := append(buf[:0],
			slog.String("request_id", requestid.FromContext(r.Context())),
			slog.String("method", r.Method),
			slog.String("path", r.URL.Path),
			slog.Int("status", sw.status),
			slog.Int64("bytes", sw.bytes),
			slog.Float64("duration_ms", float64(d.Microseconds())/1000),
			slog.String("route", in.route),
			slog.String("tenant", in.tenant),
			slog.String("outcome", outcome),
		)
		if in.key != "" {
			attrs = append(attrs, slog.String("idempotency_key", in.key), slog.Int64("fencing_token", in.token))
		}
		if in.stored != "" {
			attrs = append(attrs, slog.String("stored", in.stored))
		}
		if in.job != "" {
			attrs = append(attrs, slog.String("job_id", in.job))
		}
		if in.takeOver {
			attrs = append(attrs, slog.Bool("take_over", true))
		}
		rec := slog.NewRecord(end, slog.LevelInfo, "request", 0)
		rec.AddAttrs(attrs...)
		_ = logger.Handler().Handle(r.Context(), rec)
	})
}

// observeIdempotency records the middleware's decisions on the request.
func observeIdempotency(r *http.Request, ev idempotency.Event) {
	in := infoFrom(r.Context())
	if ev.Stored != "" {
		in.stored = string(ev.Stored)
		return
	}
	in.outcome = string(ev.Outcome)
	if trace.SpanFromContext(r.Context()).IsRecording() { // else the attributes are built for nothing
		telemetry.SetAttrs(r.Context(), telemetry.Outcome(string(ev.Outcome)), telemetry.FencingToken(ev.FencingToken))
	}
	in.key = ev.Scope.Key
	in.scope = ev.Scope
	in.token = ev.FencingToken
	in.takeOver = ev.TakeOver
}
