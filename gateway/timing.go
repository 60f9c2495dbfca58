package gateway

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

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

var (
	_ idempotency.Watcher       = timedStore{}
	_ idempotency.ItemStore     = timedStore{}
	_ idempotency.ItemCompleter = timedStore{}
)

// CompleteMany passes a batch's answers on as ClaimMany passes its claims.
func (s timedStore) CompleteMany(ctx context.Context, items []idempotency.ItemCompletion) []error {
	ic, ok := s.Store.(idempotency.ItemCompleter)
	if !ok {
		return []error{idempotency.ErrItemsUnsupported}
	}
	defer s.observe("complete_many", time.Now())
	return ic.CompleteMany(ctx, items)
}

// ClaimMany passes a batch's claims on to a store that makes them at once,
// measured as one "claim_many"; for any other store the middleware claims
// them one by one, each measured as a claim.
func (s timedStore) ClaimMany(ctx context.Context, reqs []idempotency.ClaimRequest) ([]idempotency.ClaimResult, error) {
	is, ok := s.Store.(idempotency.ItemStore)
	if !ok {
		return nil, idempotency.ErrItemsUnsupported
	}
	defer s.observe("claim_many", time.Now())
	return is.ClaimMany(ctx, reqs)
}

// immediateTimedStore is a timedStore over a store that never blocks: it
// passes idempotency.Immediate on, so the middleware still skips the
// deadline that store cannot overrun.
type immediateTimedStore struct{ timedStore }

func (immediateTimedStore) Immediate() {}

var _ idempotency.Immediate = immediateTimedStore{}

func newTimedStore(store idempotency.Store, name string, hist *prometheus.HistogramVec) idempotency.Store {
	s := timedStore{Store: store, name: name, hist: hist}
	if _, ok := store.(idempotency.Immediate); ok {
		return immediateTimedStore{s}
	}
	return s
}

var errNoWatch = errors.New("store cannot watch")

func (s timedStore) observe(op string, start time.Time) {
	s.hist.WithLabelValues(s.name, op).Observe(time.Since(start).Seconds())
}

// Store calls get a span of their own only within a recording span, as
// the upstream and Redis calls do: a request outside a trace opens none,
// and starting one even on a no-op tracer costs a handful of allocations.

func (s timedStore) Claim(ctx context.Context, req idempotency.ClaimRequest) (res idempotency.ClaimResult, err error) {
	defer s.observe("claim", time.Now())
	if trace.SpanFromContext(ctx).IsRecording() {
		var span trace.Span
		ctx, span = telemetry.Start(ctx, "idempotency.claim", telemetry.Store(s.name), telemetry.StoreOp("claim"))
		defer func() { telemetry.End(span, err) }()
	}
	return s.Store.Claim(ctx, req)
}

func (s timedStore) Renew(ctx context.Context, scope idempotency.Scope, owner string, lease time.Duration) error {
	defer s.observe("renew", time.Now())
	return s.Store.Renew(ctx, scope, owner, lease)
}

func (s timedStore) Complete(ctx context.Context, scope idempotency.Scope, owner string, resp idempotency.Response, retention time.Duration) (err error) {
	defer s.observe("complete", time.Now())
	if trace.SpanFromContext(ctx).IsRecording() {
		var span trace.Span
		ctx, span = telemetry.Start(ctx, "idempotency.complete", telemetry.Store(s.name), telemetry.StoreOp("complete"))
		defer func() { telemetry.End(span, err) }()
	}
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
