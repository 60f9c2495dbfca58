package gateway

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/middleware/requestid"
	"github.com/idemgate/idemgate/telemetry"
)

// info is what the layers of one request learn about it, for the access
// log line and the metrics written when it ends.
type info struct {
	route, tenant, key, outcome, stored, job string
	token                                    int64
	takeOver                                 bool
}

type infoKey struct{}

func infoFrom(ctx context.Context) *info {
	i, _ := ctx.Value(infoKey{}).(*info)
	if i == nil {
		return &info{} // outside the access log: writes go nowhere
	}
	return i
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
func accessLog(logger *slog.Logger, m *Metrics, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		in := &info{}
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r.WithContext(context.WithValue(r.Context(), infoKey{}, in)))
		d := time.Since(start)
		if in.route == "" {
			return // the gateway's own endpoints are not counted as traffic
		}
		outcome := in.outcome
		if outcome == "" {
			outcome = "passthrough"
		}
		m.request(in.route, outcome, d)
		if !logger.Enabled(r.Context(), slog.LevelInfo) {
			return
		}
		if in.job == "" && sw.status == http.StatusAccepted {
			// A replayed 202 names its job only in the stored Location.
			if id, ok := strings.CutPrefix(w.Header().Get("Location"), "/v1/jobs/"); ok {
				in.job = id
			}
		}
		attrs := []slog.Attr{
			slog.String("request_id", requestid.FromContext(r.Context())),
			slog.String("method", r.Method),
			slog.String("path", r.URL.Path),
			slog.Int("status", sw.status),
			slog.Int64("bytes", sw.bytes),
			slog.Float64("duration_ms", float64(d.Microseconds())/1000),
			slog.String("route", in.route),
			slog.String("tenant", in.tenant),
			slog.String("outcome", outcome),
		}
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
		logger.LogAttrs(r.Context(), slog.LevelInfo, "request", attrs...)
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
	telemetry.SetAttrs(r.Context(), telemetry.Outcome(string(ev.Outcome)), telemetry.FencingToken(ev.FencingToken))
	in.key = ev.Scope.Key
	in.token = ev.FencingToken
	in.takeOver = ev.TakeOver
}
