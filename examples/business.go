package examples

// The example handlers (invoice.go, inventory.go, payment.go,
// notification.go) each show one pattern of making an effect happen once;
// this file holds what they share: their configuration, their
// registration, and the fenced transaction every business write runs in.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/workers"
)

// DB is the PostgreSQL handle the example handlers work through: every
// business write is a transaction that checks the fence; QueryRow serves
// the reads outside one. A *pgxpool.Pool satisfies it.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Business configures the example handlers. Zero fields take the defaults
// written next to them.
type Business struct {
	// DB holds the business tables (migrations 00004 and 00007).
	// Required; usually the same pool as the workers' Deps.DB, which holds
	// the fences the handlers check.
	DB DB
	// Redis holds notification.send's dedup window. Required. It may be
	// the locks' client (Deps.Redis), not asynq's.
	Redis redis.UniversalClient
	// PartnerURL is the partner's base URL (worker.partner_url):
	// payment.charge posts to PartnerURL/charges, notification.send to
	// PartnerURL/messages. Required; http or https.
	PartnerURL string
	// HTTPClient calls the partner. Default: a client whose Timeout is
	// PartnerTimeout, on http.DefaultTransport.
	HTTPClient *http.Client
	// PartnerTimeout bounds each partner call, whatever HTTPClient's own
	// Timeout. A call that times out may still have been applied; the
	// retry sends the same Idempotency-Key, so the partner answers it with
	// the first result. Default 10s.
	PartnerTimeout time.Duration
	// Breaker shapes the circuit breaker in front of each partner endpoint.
	Breaker BreakerConfig
	// DedupWindow is how long notification.send's Redis dedup key lives.
	// Default 24h; whole seconds.
	DedupWindow time.Duration
	// DedupPrefix is prepended to the dedup keys, before "dedup:".
	// Default "".
	DedupPrefix string
	// OnDedup, if set, is told for each notification attempt whether its
	// key was already in the dedup window (hit) or not; it feeds the dedup
	// hit ratio. It runs on the handler's goroutine: keep it short.
	OnDedup func(hit bool)
	// Logger receives what the handlers see beyond their jobs' outcomes:
	// a partner that answered a repeated Idempotency-Key with another
	// effect, a dedup window that is unreachable. Default: discarded.
	Logger *slog.Logger
	// Now is the circuit breakers' clock. Default time.Now; tests move it.
	Now func() time.Time
}

// Defaults for Business.
const (
	DefaultPartnerTimeout  = 10 * time.Second
	DefaultBreakerFailures = 5
	DefaultBreakerCoolDown = 30 * time.Second
	DefaultDedupWindow     = 24 * time.Hour
)

func (b Business) withDefaults() Business {
	if b.PartnerTimeout == 0 {
		b.PartnerTimeout = DefaultPartnerTimeout
	}
	if b.HTTPClient == nil {
		b.HTTPClient = &http.Client{Timeout: b.PartnerTimeout}
	}
	if b.Breaker.Failures == 0 {
		b.Breaker.Failures = DefaultBreakerFailures
	}
	if b.Breaker.CoolDown == 0 {
		b.Breaker.CoolDown = DefaultBreakerCoolDown
	}
	if b.DedupWindow == 0 {
		b.DedupWindow = DefaultDedupWindow
	}
	if b.Logger == nil {
		b.Logger = slog.New(slog.DiscardHandler)
	}
	if b.Now == nil {
		b.Now = time.Now
	}
	return b
}

// validate reports every problem of a Business with defaults applied.
func (b Business) validate() error {
	var errs []error
	if b.DB == nil {
		errs = append(errs, errors.New("examples: business: nil DB"))
	}
	if b.Redis == nil {
		errs = append(errs, errors.New("examples: business: nil Redis (notification.send's dedup window)"))
	}
	if u, err := url.Parse(b.PartnerURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, fmt.Errorf("examples: business: partner URL %q, want an absolute http or https URL", b.PartnerURL))
	}
	if b.PartnerTimeout < 0 {
		errs = append(errs, fmt.Errorf("examples: business: partner timeout %s is negative", b.PartnerTimeout))
	}
	if b.Breaker.Failures < 1 {
		errs = append(errs, fmt.Errorf("examples: business: breaker failures %d, want at least 1", b.Breaker.Failures))
	}
	if b.Breaker.CoolDown < 0 {
		errs = append(errs, fmt.Errorf("examples: business: breaker cool-down %s is negative", b.Breaker.CoolDown))
	}
	if b.DedupWindow < time.Second || b.DedupWindow%time.Second != 0 {
		errs = append(errs, fmt.Errorf("examples: business: dedup window %s, want at least 1s in whole seconds", b.DedupWindow))
	}
	return errors.Join(errs...)
}

// Validate reports every problem of b, after defaults, at once.
func (b Business) Validate() error { return b.withDefaults().validate() }

// Register adds the four example handlers to hs under their tasks
// (TaskInvoiceCreate, TaskInventoryAdjust, TaskPaymentCharge,
// TaskNotificationSend). Their jobs must be declared (JobsYAML): the
// declaration gives each its schema, business key and resource, and
// hs.Mux wraps each in the framework's execution state, lock, fencing and
// retry classification. It reports every problem at once — of b, and a
// task hs already has — and adds nothing then.
func Register(hs *workers.Handlers, b Business) error {
	if hs == nil {
		return errors.New("examples: register: nil handlers")
	}
	b = b.withDefaults()
	errs := []error{b.validate()}
	for _, task := range Tasks() {
		if hs.Has(task) {
			errs = append(errs, fmt.Errorf("examples: register: %s already has a handler", task))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	// Each partner endpoint gets a breaker of its own: a failing /messages
	// must not stop charges.
	base := strings.TrimSuffix(b.PartnerURL, "/")
	workers.Add(hs, TaskInvoiceCreate, invoices{db: b.DB}.create)
	workers.Add(hs, TaskInventoryAdjust, inventory{db: b.DB}.adjust)
	workers.Add(hs, TaskPaymentCharge, payments{db: b.DB, charges: newPartner(base+"/charges", b), log: b.Logger.With("task", TaskPaymentCharge)}.charge)
	workers.Add(hs, TaskNotificationSend, newNotifier(b, newPartner(base+"/messages", b)).send)
	return nil
}

// fenced runs write in a transaction that first checks the job's fence, so
// a worker that lost the job's resource to a newer owner writes nothing:
// the transaction fails with a *fence.StaleTokenError.
func fenced[T any](ctx context.Context, db DB, job workers.Job[T], write func(tx pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if err := job.CheckFence(ctx, tx); err != nil {
			return err
		}
		return write(tx)
	})
}

// scopedKey is the job's business key within its tenant ("acme/payment:p-1";
// the bare key for a task without a tenant). A partner dedupes by
// Idempotency-Key alone, so two tenants' payments with the same id must not
// share one; the dedup window is scoped the same way.
func scopedKey[T any](job workers.Job[T]) string { return workers.Scope(job.Tenant, job.Key) }
