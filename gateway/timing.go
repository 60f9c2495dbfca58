package gateway

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/telemetry"
)

// timedStore measures every store operation. It always offers Watch and
// reports an error when the store underneath cannot watch, so the
// middleware falls back to polling.
type timedStore struct {
	idempotency.Store
	name string
	hist *prometheus.HistogramVec
}

var _ idempotency.Watcher = timedStore{}

var errNoWatch = errors.New("store cannot watch")

func (s timedStore) observe(op string, start time.Time) {
	s.hist.WithLabelValues(s.name, op).Observe(time.Since(start).Seconds())
}

func (s timedStore) Claim(ctx context.Context, req idempotency.ClaimRequest) (res idempotency.ClaimResult, err error) {
	defer s.observe("claim", time.Now())
	ctx, span := telemetry.Start(ctx, "idempotency.claim", telemetry.Store(s.name), telemetry.StoreOp("claim"))
	defer func() { telemetry.End(span, err) }()
	return s.Store.Claim(ctx, req)
}

func (s timedStore) Renew(ctx context.Context, scope idempotency.Scope, owner string, lease time.Duration) error {
	defer s.observe("renew", time.Now())
	return s.Store.Renew(ctx, scope, owner, lease)
}

func (s timedStore) Complete(ctx context.Context, scope idempotency.Scope, owner string, resp idempotency.Response, retention time.Duration) (err error) {
	defer s.observe("complete", time.Now())
	ctx, span := telemetry.Start(ctx, "idempotency.complete", telemetry.Store(s.name), telemetry.StoreOp("complete"))
	defer func() { telemetry.End(span, err) }()
	return s.Store.Complete(ctx, scope, owner, resp, retention)
}

func (s timedStore) Release(ctx context.Context, scope idempotency.Scope, owner string) error {
	defer s.observe("release", time.Now())
	return s.Store.Release(ctx, scope, owner)
}

func (s timedStore) MarkUnknown(ctx context.Context, scope idempotency.Scope, owner string) error {
	defer s.observe("mark_unknown", time.Now())
	return s.Store.MarkUnknown(ctx, scope, owner)
}

func (s timedStore) Watch(ctx context.Context, scope idempotency.Scope) (<-chan struct{}, func(), error) {
	w, ok := s.Store.(idempotency.Watcher)
	if !ok {
		return nil, nil, errNoWatch
	}
	return w.Watch(ctx, scope)
}

// timedUpstream measures the proxied call of one route.
func timedUpstream(m *Metrics, route string, next http.Handler) http.Handler {
	hist := m.upstream.WithLabelValues(route)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		next.ServeHTTP(w, r)
		hist.Observe(time.Since(start).Seconds())
	})
}
