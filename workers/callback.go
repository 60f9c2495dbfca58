package workers

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/idemgate/idemgate/job"
)

// FinalCallbacks sends the final-status callbacks of jobs whose task
// declares on_final (job.Spec.OnFinal): one Standard Webhooks-signed POST
// per final status a job reaches, whatever made it final (an attempt, a
// cancel, the dead-letter queue), never one per attempt.
//
// It works from the jobs table and the job_callbacks outbox (see
// job.Callbacks): each round it makes the events of jobs that became
// final, claims the due ones (FOR UPDATE SKIP LOCKED, so the workers of a
// fleet share them), POSTs them and records every attempt. A worker that
// dies between a POST and its record leaves the event due again: the
// receiver gets it again with the same webhook-id, and dedupes by it.
//
//	cb := workers.NewFinalCallbacks(workers.FinalCallbacksConfig{DB: pool, Specs: specs, Document: doc})
//	go cb.Run(ctx)
type FinalCallbacks struct {
	store    *job.Callbacks
	doc      job.Document
	senders  map[string]*callbackSender
	tasks    []string
	interval time.Duration
	batch    int
	lease    time.Duration
	backoff  func(attempt int) time.Duration
	worker   string
	logger   *slog.Logger
	now      func() time.Time
	observer CallbackObserver
}

// FinalCallbacksConfig configures FinalCallbacks. Every field documents
// its default.
type FinalCallbacksConfig struct {
	// DB holds the jobs table and the outbox. Required.
	DB job.DB
	// Specs are the declared jobs; those without OnFinal are left out.
	Specs []*job.Spec
	// Document is the job document an event carries as data: what GET
	// /v1/jobs/{id} shows. Required.
	Document job.Document
	// Client sends the callbacks. Default: a client on
	// http.DefaultTransport. Redirects are never followed.
	Client *http.Client
	// Interval between rounds when there is nothing to do. Default 1s.
	Interval time.Duration
	// Batch is the most events made, and the most sent at once, per
	// round. Default 32.
	Batch int
	// Backoff is the wait after failed attempt n (1 for the first).
	// Default DefaultCallbackBackoff.
	Backoff func(attempt int) time.Duration
	// Worker names this process in the callback ledger. Default
	// "<hostname>:<pid>".
	Worker string
	// Logger. Default slog.Default().
	Logger *slog.Logger
	// Now is the clock of webhook-timestamp. Default time.Now.
	Now func() time.Time
	// Observer counts the attempts; nil counts nothing.
	Observer CallbackObserver
}

// CallbackObserver is told how each recorded callback attempt ended.
// telemetry.CallbackMetrics implements it.
type CallbackObserver interface {
	CallbackAttempt(task string, outcome job.CallbackOutcome)
}

// Bounds of DefaultCallbackBackoff.
const (
	callbackBackoffBase = 10 * time.Second
	callbackBackoffMax  = time.Hour
)

// DefaultCallbackBackoff waits between half and all of 10s·2^(n−1) after
// failed attempt n, at most an hour: the tenth attempt of a callback that
// keeps failing comes between 43 and 85 minutes after the first.
func DefaultCallbackBackoff(attempt int) time.Duration {
	d := callbackBackoffMax
	if attempt < 20 {
		d = min(callbackBackoffBase<<max(attempt-1, 0), callbackBackoffMax)
	}
	return d/2 + rand.N(d/2+1)
}

// NewFinalCallbacks returns the sender of cfg's callbacks. It panics on a
// callback whose URL is not an absolute http(s) URL, whose secret is empty
// or whose static header is malformed, as Deliver does: those are
// configuration mistakes, found at start-up.
func NewFinalCallbacks(cfg FinalCallbacksConfig) *FinalCallbacks {
	f := &FinalCallbacks{
		store:    job.NewCallbacks(cfg.DB),
		doc:      cfg.Document,
		senders:  map[string]*callbackSender{},
		interval: cfg.Interval,
		batch:    cfg.Batch,
		backoff:  cfg.Backoff,
		worker:   workerName(cfg.Worker),
		logger:   cfg.Logger,
		now:      cfg.Now,
		observer: cfg.Observer,
	}
	if f.interval <= 0 {
		f.interval = time.Second
	}
	if f.batch <= 0 {
		f.batch = 32
	}
	if f.backoff == nil {
		f.backoff = DefaultCallbackBackoff
	}
	if f.logger == nil {
		f.logger = slog.Default()
	}
	if f.now == nil {
		f.now = time.Now
	}
	var longest time.Duration
	for _, s := range cfg.Specs {
		if s.OnFinal == nil {
			continue
		}
		h := s.OnFinal.HTTP
		dl := newDeliverer(HTTPDelivery{URL: h.URL, Secrets: h.Secrets, Timeout: h.Timeout, Headers: h.Headers,
			Client: cfg.Client, Now: f.now})
		maxAttempts := s.OnFinal.MaxAttempts
		if maxAttempts <= 0 {
			maxAttempts = job.DefaultCallbackMaxAttempts
		}
		f.senders[s.Task] = &callbackSender{dl: dl, maxAttempts: maxAttempts}
		f.tasks = append(f.tasks, s.Task)
		longest = max(longest, dl.timeout)
	}
	// A claim outlasts the POST it is for: another sender takes the event
	// only once this one is surely done with it, or dead.
	f.lease = longest + 30*time.Second
	return f
}

// Tasks are the tasks whose jobs get callbacks; none means Run has
// nothing to do.
func (f *FinalCallbacks) Tasks() []string { return f.tasks }

// Run sends callbacks until ctx ends: rounds back to back while they find
// work, then a pause of the interval. A failed round is logged and tried
// again after the pause. It returns nil when ctx ends. The caller runs it
// in a goroutine it owns and waits for.
func (f *FinalCallbacks) Run(ctx context.Context) error {
	if len(f.tasks) == 0 {
		<-ctx.Done()
		return nil
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		}
		for ctx.Err() == nil {
			busy, err := f.Round(ctx)
			if err != nil {
				if ctx.Err() == nil {
					f.logger.Warn("final callbacks: round failed", "err", err)
				}
				break
			}
			if !busy {
				break
			}
		}
		timer.Reset(f.interval)
	}
}

// Round makes the events of jobs that became final, then claims the due
// events and sends them, each in its own goroutine, and waits for them.
// It reports whether either step came back with a full batch (more work
// may be waiting).
func (f *FinalCallbacks) Round(ctx context.Context) (bool, error) {
	made, err := f.store.Collect(ctx, f.tasks, f.batch, f.doc)
	if err != nil {
		return false, err
	}
	due, err := f.store.Claim(ctx, f.tasks, f.batch, f.lease)
	if err != nil {
		return false, err
	}
	var wg sync.WaitGroup
	for _, p := range due {
		wg.Go(func() { f.attempt(ctx, p) })
	}
	wg.Wait()
	return made == f.batch || len(due) == f.batch, nil
}

// attempt POSTs one claimed event and records what happened.
func (f *FinalCallbacks) attempt(ctx context.Context, p job.PendingCallback) {
	s := f.senders[p.Task]
	if s == nil {
		return // the claim was for our tasks only
	}
	started := f.now()
	status, retryAfter, err := s.send(ctx, p)
	if ctx.Err() != nil && err != nil {
		// Shutting down: no verdict. The claim runs out and the event is
		// sent again, with the same webhook-id.
		return
	}
	r := job.CallbackResult{Status: status, Worker: f.worker, StartedAt: started}
	switch {
	case err == nil:
		r.Outcome = job.CallbackDelivered
	case p.Attempt >= s.maxAttempts:
		r.Outcome, r.Error = job.CallbackAbandoned, err.Error()
	default:
		r.Outcome, r.Error = job.CallbackRetry, err.Error()
		r.Retry = max(f.backoff(p.Attempt), retryAfter)
	}
	// An answer that came is recorded even while the worker shuts down:
	// a delivered event left unrecorded would be sent again.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := f.store.Settle(sctx, p, r); err != nil {
		f.logger.Warn("final callbacks: recording an attempt failed; the event will be sent again",
			"job_id", p.JobID, "webhook_id", p.ID(), "attempt", p.Attempt, "err", err)
		return
	}
	if f.observer != nil {
		f.observer.CallbackAttempt(p.Task, r.Outcome)
	}
	switch r.Outcome {
	case job.CallbackAbandoned:
		f.logger.Error("final callbacks: abandoned after the last attempt", "job_id", p.JobID, "webhook_id", p.ID(),
			"event", p.Event, "attempts", p.Attempt, "err", r.Error)
	case job.CallbackRetry:
		f.logger.Info("final callbacks: attempt failed; retrying", "job_id", p.JobID, "webhook_id", p.ID(),
			"attempt", p.Attempt, "retry_in", r.Retry.String(), "err", r.Error)
	}
}

// callbackSender POSTs the events of one task.
type callbackSender struct {
	dl          *deliverer
	maxAttempts int
}

// send POSTs the event, signed as a delivery is (Standard Webhooks, every
// secret), and returns the receiver's status (0 without an answer), the
// delay a Retry-After asked for, and an error unless it answered 2xx.
func (s *callbackSender) send(ctx context.Context, p job.PendingCallback) (int, time.Duration, error) {
	dl := s.dl
	actx, cancel := context.WithTimeout(ctx, dl.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(actx, http.MethodPost, dl.url, bytes.NewReader(p.Body))
	if err != nil {
		return 0, 0, fmt.Errorf("callback to %s: %w", dl.shownURL, err)
	}
	req.GetBody = nil // one attempt is one request; see deliver
	for name, values := range dl.headers {
		req.Header[name] = values
	}
	id := p.ID()
	ts := strconv.FormatInt(dl.now().Unix(), 10)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(headerWebhookID, id)
	req.Header.Set(headerWebhookTimestamp, ts)
	if len(dl.secrets) > 0 {
		req.Header.Set(headerWebhookSignature, signatures(dl.secrets, id, ts, p.Body))
	}
	if p.Tenant != "" {
		req.Header.Set(headerTenant, p.Tenant)
	}
	req.Header.Set(headerTask, p.Task)
	req.Header.Set(headerAttempt, strconv.Itoa(p.Attempt))
	resp, err := dl.client.Do(req)
	if err != nil {
		return 0, 0, dl.callError(ctx, actx, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, dl.maxBytes))
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return resp.StatusCode, 0, nil
	}
	after, _ := retryAfter(resp.Header.Get("Retry-After"), dl.now(), dl.maxRetryAfter)
	return resp.StatusCode, after, &statusError{url: dl.shownURL, status: resp.StatusCode, body: clip(body, maxErrorBody)}
}
