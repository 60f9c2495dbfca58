package workers

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
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
// job.Callbacks): it makes the events of jobs that became final, claims
// the due ones (FOR UPDATE SKIP LOCKED, so the workers of a fleet share
// them), POSTs them and records every attempt. A worker that dies between
// a POST and its record leaves the event due again: the receiver gets it
// again with the same webhook-id, and dedupes by it.
//
// The POSTs run in a bounded pool, each in a goroutine Run owns and waits
// for. Events are claimed whenever a slot is free, never in rounds that
// wait for their slowest POST, and each receiver (the host of a callback
// URL) has slots of its own within the pool: a slow receiver holds at
// most PerReceiver of them, and every other receiver's events go on.
//
//	cb := workers.NewFinalCallbacks(workers.FinalCallbacksConfig{DB: pool, Specs: specs, Document: doc})
//	go cb.Run(ctx)
type FinalCallbacks struct {
	store   *job.Callbacks
	doc     job.Document
	senders map[string]*callbackSender
	tasks   []string
	// receivers are the hosts of the callback URLs, in a fixed order;
	// receiverTasks the tasks that post to each.
	receivers     []string
	receiverTasks map[string][]string
	interval      time.Duration
	batch         int
	concurrency   int
	perReceiver   int
	lease         time.Duration
	backoff       func(attempt int) time.Duration
	worker        string
	logger        *slog.Logger
	now           func() time.Time
	observer      CallbackObserver
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
	// Interval between passes when there is nothing to do. Default 1s.
	Interval time.Duration
	// Batch is the most events made at once. Default 32.
	Batch int
	// Concurrency is the most POSTs in flight at once. Default 32.
	Concurrency int
	// PerReceiver is the most POSTs in flight at once to one receiver,
	// the host (and port) of a callback URL, so that a slow receiver
	// holds at most that many of the Concurrency slots. Default 8, at
	// most Concurrency.
	PerReceiver int
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
		store:         job.NewCallbacks(cfg.DB),
		doc:           cfg.Document,
		senders:       map[string]*callbackSender{},
		receiverTasks: map[string][]string{},
		interval:      cfg.Interval,
		batch:         cfg.Batch,
		concurrency:   cfg.Concurrency,
		perReceiver:   cfg.PerReceiver,
		backoff:       cfg.Backoff,
		worker:        workerName(cfg.Worker),
		logger:        cfg.Logger,
		now:           cfg.Now,
		observer:      cfg.Observer,
	}
	if f.interval <= 0 {
		f.interval = time.Second
	}
	if f.batch <= 0 {
		f.batch = 32
	}
	if f.concurrency <= 0 {
		f.concurrency = 32
	}
	if f.perReceiver <= 0 {
		f.perReceiver = 8
	}
	f.perReceiver = min(f.perReceiver, f.concurrency)
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
		u, _ := url.Parse(h.URL) // newDeliverer has checked it
		rcv := strings.ToLower(u.Host)
		if _, ok := f.receiverTasks[rcv]; !ok {
			f.receivers = append(f.receivers, rcv)
		}
		f.receiverTasks[rcv] = append(f.receiverTasks[rcv], s.Task)
	}
	// A claim outlasts the POST it is for: another sender takes the event
	// only once this one is surely done with it, or dead.
	f.lease = longest + 30*time.Second
	return f
}

// Tasks are the tasks whose jobs get callbacks; none means Run has
// nothing to do.
func (f *FinalCallbacks) Tasks() []string { return f.tasks }

// Run sends callbacks until ctx ends. It makes events and claims due
// ones whenever a slot of the pool is free: at once after a pass that
// made a full batch, when a POST ends, and otherwise after the interval.
// A failed pass is logged and tried again after the interval. When ctx
// ends it waits for the POSTs in flight, which end without a verdict, and
// returns nil. The caller runs it in a goroutine it owns and waits for.
func (f *FinalCallbacks) Run(ctx context.Context) error {
	if len(f.tasks) == 0 {
		<-ctx.Done()
		return nil
	}
	inflight := f.newSends()
	defer inflight.wg.Wait()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		case <-inflight.ended:
		}
		busy, err := f.pass(ctx, inflight)
		switch {
		case err != nil:
			if ctx.Err() == nil {
				f.logger.Warn("final callbacks: a pass failed", "err", err)
			}
			timer.Reset(f.interval)
		case busy:
			timer.Reset(0)
		default:
			timer.Reset(f.interval)
		}
	}
}

// Round makes the events of jobs that became final, claims as many due
// events as the pool's slots allow, sends them, and waits for them. It
// reports whether more events may be waiting to be made. Run does not
// wait like this; Round is one step of it, for a caller that paces the
// steps itself.
func (f *FinalCallbacks) Round(ctx context.Context) (bool, error) {
	inflight := f.newSends()
	defer inflight.wg.Wait()
	return f.pass(ctx, inflight)
}

// pass makes the events of jobs that became final, then claims, for each
// receiver with free slots, as many due events as it has slots, and
// starts their POSTs in inflight without waiting for them. It reports
// whether it made a full batch of events (more may be waiting).
func (f *FinalCallbacks) pass(ctx context.Context, inflight *sends) (bool, error) {
	made, err := f.store.Collect(ctx, f.tasks, f.batch, f.doc)
	if err != nil {
		return false, err
	}
	// Each pass starts with the next receiver, so that a small pool is
	// shared among them.
	inflight.next = (inflight.next + 1) % len(f.receivers)
	for i := range f.receivers {
		rcv := f.receivers[(inflight.next+i)%len(f.receivers)]
		free := inflight.free(rcv)
		if free == 0 {
			continue
		}
		due, err := f.store.Claim(ctx, f.receiverTasks[rcv], free, f.lease)
		if err != nil {
			return false, err
		}
		for _, p := range due {
			inflight.start(rcv, func() { f.attempt(ctx, p) })
		}
	}
	return made == f.batch, nil
}

// sends are the POSTs in flight of one Run or Round: at most concurrency
// in all and perReceiver per receiver. Each runs in a goroutine counted
// in wg; ended gets a token when one ends, for Run to claim more.
type sends struct {
	concurrency, perReceiver int
	wg                       sync.WaitGroup
	ended                    chan struct{}
	// next is the receiver the next pass starts with (pass only).
	next int

	mu    sync.Mutex
	total int
	per   map[string]int
}

func (f *FinalCallbacks) newSends() *sends {
	return &sends{concurrency: f.concurrency, perReceiver: f.perReceiver, ended: make(chan struct{}, 1), per: map[string]int{}}
}

// free is how many more POSTs to rcv may start now.
func (s *sends) free(rcv string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return max(0, min(s.concurrency-s.total, s.perReceiver-s.per[rcv]))
}

// start runs send to rcv in a goroutine of its own, holding a slot until
// it returns.
func (s *sends) start(rcv string, send func()) {
	s.mu.Lock()
	s.total++
	s.per[rcv]++
	s.mu.Unlock()
	s.wg.Go(func() {
		send()
		s.mu.Lock()
		s.total--
		s.per[rcv]--
		s.mu.Unlock()
		select {
		case s.ended <- struct{}{}:
		default: // a wake-up is already pending
		}
	})
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
	if err := f.store.Attempted(sctx, p, r); err != nil {
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
