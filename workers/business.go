package workers

// The example business handlers (invoice.go, inventory.go, payment.go,
// notification.go) each show one pattern of making an effect happen once;
// this file holds what they share: their configuration, their registration
// on a mux, and the client for the partner API that payment.charge and
// notification.send call, with its circuit breaker.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/enqueue"
)

// BusinessDB is the PostgreSQL handle the business handlers work through:
// every business write is a transaction that checks the fence; QueryRow
// serves the reads outside one. A *pgxpool.Pool satisfies it.
type BusinessDB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Business configures the example business handlers. Zero fields take the
// defaults written next to them.
type Business struct {
	// DB holds the business tables (migrations/00004_business.sql).
	// Required; usually the same pool as Deps.DB.
	DB BusinessDB
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
	// Now is the circuit breakers' clock. Default time.Now; tests move it.
	Now func() time.Time
}

// BreakerConfig shapes a circuit breaker. A partner that is down is asked
// again only once per CoolDown instead of once per retry of every job,
// which spares it a retry storm when it comes back.
type BreakerConfig struct {
	// Failures is how many failures in a row (5xx, 408, 425, 429,
	// timeouts, connection errors) open the circuit. Default 5.
	Failures int
	// CoolDown is how long an open circuit refuses calls before it lets one
	// probe through (half-open): the probe's success closes the circuit, its
	// failure opens it for another CoolDown. Default 30s.
	CoolDown time.Duration
}

// Defaults for Business.
const (
	DefaultPartnerTimeout   = 10 * time.Second
	DefaultBreakerFailures  = 5
	DefaultBreakerCoolDown  = 30 * time.Second
	DefaultDedupWindow      = 24 * time.Hour
	maxPartnerResponseBytes = 1 << 20
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
	if b.Now == nil {
		b.Now = time.Now
	}
	return b
}

// validate reports every problem of a Business with defaults applied.
func (b Business) validate() error {
	var errs []error
	if b.DB == nil {
		errs = append(errs, errors.New("workers: business: nil DB"))
	}
	if b.Redis == nil {
		errs = append(errs, errors.New("workers: business: nil Redis (notification.send's dedup window)"))
	}
	if u, err := url.Parse(b.PartnerURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, fmt.Errorf("workers: business: partner URL %q, want an absolute http or https URL", b.PartnerURL))
	}
	if b.PartnerTimeout < 0 {
		errs = append(errs, fmt.Errorf("workers: business: partner timeout %s is negative", b.PartnerTimeout))
	}
	if b.Breaker.Failures < 1 {
		errs = append(errs, fmt.Errorf("workers: business: breaker failures %d, want at least 1", b.Breaker.Failures))
	}
	if b.Breaker.CoolDown < 0 {
		errs = append(errs, fmt.Errorf("workers: business: breaker cool-down %s is negative", b.Breaker.CoolDown))
	}
	if b.DedupWindow < time.Second || b.DedupWindow%time.Second != 0 {
		errs = append(errs, fmt.Errorf("workers: business: dedup window %s, want at least 1s in whole seconds", b.DedupWindow))
	}
	return errors.Join(errs...)
}

// Validate reports every problem of b, after defaults, at once.
func (b Business) Validate() error { return b.withDefaults().validate() }

// Register puts the four example handlers on mux under their task kinds
// (enqueue.TaskInvoiceCreate, TaskInventoryAdjust, TaskPaymentCharge,
// TaskNotificationSend), each wrapped by Handle with deps, so each gets
// execution state, the resource lock, fencing and retry classification.
// It reports every problem of b at once and registers nothing then.
func Register(mux *asynq.ServeMux, deps Deps, b Business) error {
	if mux == nil {
		return errors.New("workers: register: nil mux")
	}
	handlers, err := businessHandlers(deps, b)
	if err != nil {
		return err
	}
	for _, kind := range []string{enqueue.TaskInvoiceCreate, enqueue.TaskInventoryAdjust, enqueue.TaskPaymentCharge, enqueue.TaskNotificationSend} {
		mux.Handle(kind, handlers[kind])
	}
	return nil
}

// businessHandlers builds the four handlers, by task kind. Each partner
// endpoint gets a breaker of its own: a failing /messages must not stop
// charges.
func businessHandlers(deps Deps, b Business) (map[string]asynq.Handler, error) {
	b = b.withDefaults()
	if err := b.validate(); err != nil {
		return nil, err
	}
	base := strings.TrimSuffix(b.PartnerURL, "/")
	charges := newPartner(base+"/charges", b)
	messages := newPartner(base+"/messages", b)
	return map[string]asynq.Handler{
		enqueue.TaskInvoiceCreate:    invoiceHandler(deps, b.DB),
		enqueue.TaskInventoryAdjust:  inventoryHandler(deps, b.DB),
		enqueue.TaskPaymentCharge:    paymentHandler(deps, b.DB, charges),
		enqueue.TaskNotificationSend: notificationHandler(deps, b, messages),
	}, nil
}

// validPayload refuses, permanently, a payload the gateway would not have
// accepted: a task can also be enqueued by other means, and no retry makes
// a bad payload good.
func validPayload(p enqueue.Payload) error {
	if errs := p.Validate(); len(errs) > 0 {
		return Permanent(&enqueue.PayloadError{Kind: enqueue.ErrInvalid, Fields: errs})
	}
	return nil
}

// ErrCircuitOpen is what a partner call returns, without calling, while the
// endpoint's circuit is open. It is transient: the job is retried with
// backoff and the call is made once the circuit lets calls through again.
var ErrCircuitOpen = errors.New("workers: partner circuit open")

// PartnerError is a partner's answer other than 2xx. Status 408, 425, 429
// and 5xx are transient (the partner did not process the request, or may
// answer differently later); every other 4xx is a refusal retrying cannot
// change, and is wrapped with Permanent.
type PartnerError struct {
	Endpoint string
	Status   int
	// Body is the start of the partner's answer, for the job's last_error.
	Body string
}

func (e *PartnerError) Error() string {
	return fmt.Sprintf("partner %s answered %d: %s", e.Endpoint, e.Status, e.Body)
}

// Transient reports whether the partner may accept the same request later.
func (e *PartnerError) Transient() bool {
	switch {
	case e.Status == http.StatusRequestTimeout, e.Status == http.StatusTooEarly, e.Status == http.StatusTooManyRequests:
		return true
	case e.Status >= 400 && e.Status < 500:
		return false
	}
	return true
}

// partner calls one endpoint of the partner API. Every call of one job
// carries the job's key as Idempotency-Key and the same body, so however
// often it is sent the partner applies it once and answers every repeat
// with the first result.
type partner struct {
	endpoint string
	client   *http.Client
	timeout  time.Duration
	breaker  *breaker
}

func newPartner(endpoint string, b Business) *partner {
	return &partner{
		endpoint: endpoint,
		client:   b.HTTPClient,
		timeout:  b.PartnerTimeout,
		breaker:  newBreaker(b.Breaker, b.Now),
	}
}

// post sends body with the Idempotency-Key key and returns the "id" of the
// effect from the partner's JSON answer. Its error is transient unless the
// partner refused the request for good (Permanent).
func (p *partner) post(ctx context.Context, key string, body []byte) (string, error) {
	done, err := p.breaker.allow()
	if err != nil {
		return "", fmt.Errorf("partner %s: %w", p.endpoint, err)
	}
	id, outcome, err := p.do(ctx, key, body)
	done(outcome)
	return id, err
}

func (p *partner) do(job context.Context, key string, body []byte) (string, callOutcome, error) {
	ctx, cancel := context.WithTimeout(job, p.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.endpoint, bytes.NewReader(body))
	if err != nil {
		return "", callIgnored, Permanent(fmt.Errorf("partner %s: %w", p.endpoint, err))
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := p.client.Do(req)
	if err != nil {
		if job.Err() != nil {
			// Our own job stopped (its lease was lost, a shutdown): that
			// says nothing about the partner's health.
			return "", callIgnored, fmt.Errorf("partner %s: %w", p.endpoint, err)
		}
		// A timeout or a dropped connection is ambiguous: the partner may
		// have applied the request. The retry sends the same key.
		return "", callFailed, fmt.Errorf("partner %s: %w", p.endpoint, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxPartnerResponseBytes))
	if err != nil {
		return "", callFailed, fmt.Errorf("partner %s: read answer: %w", p.endpoint, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		perr := &PartnerError{Endpoint: p.endpoint, Status: resp.StatusCode, Body: clipBody(data)}
		if perr.Transient() {
			return "", callFailed, perr
		}
		// The partner is up and answering; it refuses this request.
		return "", callSucceeded, Permanent(perr)
	}
	var answer struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(data, &answer); err != nil || answer.ID == "" {
		// A repeat of the same key gets the same answer, so retrying cannot
		// help; the effect may have happened, which the operator must see.
		return "", callSucceeded, Permanent(fmt.Errorf("partner %s answered %d without an effect id: %s",
			p.endpoint, resp.StatusCode, clipBody(data)))
	}
	return answer.ID, callSucceeded, nil
}

// clipBody keeps the start of a partner's answer for an error message.
func clipBody(b []byte) string {
	const max = 256
	s := strings.TrimSpace(strings.ToValidUTF8(string(b), "\uFFFD"))
	if len(s) > max {
		s = s[:max] + "…"
	}
	return s
}

// callOutcome is what a call says about the partner's health.
type callOutcome int

const (
	callSucceeded callOutcome = iota // the partner answered (a refusal included)
	callFailed                       // 5xx, 408/425/429, timeout, connection error
	callIgnored                      // our side gave up; no verdict on the partner
)

// breaker is a consecutive-failures circuit breaker: closed, it lets every
// call through and counts failures in a row; Failures of them open it; open,
// it refuses calls until CoolDown has passed, then lets one probe through
// (half-open) whose outcome closes or reopens it.
type breaker struct {
	failures int
	coolDown time.Duration
	now      func() time.Time

	mu       sync.Mutex
	state    breakerState
	inARow   int
	openedAt time.Time
}

type breakerState int

const (
	breakerClosed breakerState = iota
	breakerOpen
	breakerHalfOpen // one probe in flight
)

func newBreaker(cfg BreakerConfig, now func() time.Time) *breaker {
	return &breaker{failures: cfg.Failures, coolDown: cfg.CoolDown, now: now}
}

// allow returns ErrCircuitOpen while the circuit refuses calls, and
// otherwise a function the caller must call once with the call's outcome.
func (b *breaker) allow() (func(callOutcome), error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case breakerHalfOpen:
		return nil, ErrCircuitOpen
	case breakerOpen:
		if b.now().Sub(b.openedAt) < b.coolDown {
			return nil, ErrCircuitOpen
		}
		b.state = breakerHalfOpen
		return b.probeDone, nil
	}
	return b.callDone, nil
}

func (b *breaker) callDone(o callOutcome) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state != breakerClosed {
		// Another call opened the circuit while this one was in flight.
		return
	}
	switch o {
	case callSucceeded:
		b.inARow = 0
	case callFailed:
		b.inARow++
		if b.inARow >= b.failures {
			b.state, b.openedAt = breakerOpen, b.now()
		}
	}
}

func (b *breaker) probeDone(o callOutcome) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch o {
	case callSucceeded:
		b.state, b.inARow = breakerClosed, 0
	case callFailed:
		b.state, b.openedAt = breakerOpen, b.now()
	default:
		// No verdict: the next call may probe at once.
		b.state = breakerOpen
	}
}
