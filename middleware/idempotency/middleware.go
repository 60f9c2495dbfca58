package idempotency

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"
)

// HeaderReplayed marks a replayed response.
const HeaderReplayed = "Idempotent-Replayed"

// HeaderBodyOmitted marks a replay whose original body was too large to
// store.
const HeaderBodyOmitted = "Idempotent-Body-Omitted"

// Middleware enforces idempotency for one route.
type Middleware struct {
	cfg   Config
	store Store
	fp    *Fingerprinter
}

// New validates cfg and returns the middleware for its route.
func New(store Store, cfg Config) (*Middleware, error) {
	if store == nil {
		return nil, errors.New("idempotency: nil store")
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("idempotency: %w", err)
	}
	cfg = cfg.withDefaults()
	fp, err := NewFingerprinter(cfg.FingerprintHeaders, cfg.FingerprintJSONFields)
	if err != nil {
		return nil, err
	}
	return &Middleware{cfg: cfg, store: store, fp: fp}, nil
}

// Config returns the effective configuration, defaults filled in.
func (m *Middleware) Config() Config { return m.cfg }

// Wrap returns next guarded by the middleware.
func (m *Middleware) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !slices.Contains(m.cfg.Methods, r.Method) {
			next.ServeHTTP(w, r)
			return
		}
		m.serve(w, r, next)
	})
}

func (m *Middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	key, err := ParseKey(r.Header.Values(HeaderKey), m.cfg.KeySyntax, m.cfg.MaxKeyLength)
	if err != nil {
		outcome := OutcomeInvalidKey
		if errors.Is(err, ErrKeyMissing) {
			outcome = OutcomeMissingKey
			err = &RequestError{Err: ErrKeyMissing, Detail: r.Method + " requests to this route need an Idempotency-Key header"}
		}
		m.refuse(w, r, Event{Outcome: outcome}, err)
		return
	}
	scope := Scope{Tenant: m.cfg.Tenant(r), Route: m.cfg.Route, Key: key}

	body, err := m.readBody(r)
	if err != nil {
		m.refuse(w, r, Event{Outcome: OutcomeTooLarge, Scope: scope}, err)
		return
	}
	fingerprint := m.fp.Fingerprint(FingerprintInput{
		Method: r.Method, Route: m.cfg.Route, Path: r.URL.Path, RawQuery: r.URL.RawQuery,
		ContentType: r.Header.Get("Content-Type"), Header: r.Header, Body: body,
	})

	if rec, ok := m.cfg.ReplayCache.get(scope); ok {
		m.answerExisting(w, r, fingerprint, rec)
		return
	}
	req := ClaimRequest{Scope: scope, Fingerprint: fingerprint, Owner: newOwner(), Lease: m.cfg.Lease, Retention: m.cfg.Retention}
	res, err := m.store.Claim(r.Context(), req)
	if err == nil && !res.Claimed && res.Record.State == StateInFlight && res.Record.Fingerprint == fingerprint && m.cfg.WaitInFlight > 0 {
		res, err = m.waitInFlight(r.Context(), req, res)
	}
	if err != nil {
		m.storeFailed(w, r, next, scope, err)
		return
	}
	if !res.Claimed {
		m.cfg.ReplayCache.put(res.Record)
		m.answerExisting(w, r, fingerprint, res.Record)
		return
	}
	m.execute(w, r, next, req, res)
}

func (m *Middleware) readBody(r *http.Request) ([]byte, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	limit := m.cfg.MaxRequestBytes
	if r.ContentLength > limit {
		return nil, tooLarge(limit)
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	_ = r.Body.Close()
	if err != nil {
		return nil, &RequestError{Err: ErrRequestTooLarge, Detail: "the request body could not be read", Cause: err}
	}
	if int64(len(body)) > limit {
		return nil, tooLarge(limit)
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	return body, nil
}

func tooLarge(limit int64) error {
	return &RequestError{Err: ErrRequestTooLarge, Detail: fmt.Sprintf("the request body is larger than %d bytes", limit)}
}

// answerExisting answers a request whose key has a record it did not claim.
func (m *Middleware) answerExisting(w http.ResponseWriter, r *http.Request, fingerprint string, rec Record) {
	ev := Event{Scope: rec.Scope, FencingToken: rec.FencingToken}
	switch {
	case rec.Fingerprint != fingerprint:
		ev.Outcome = OutcomeMismatch
		m.refuse(w, r, ev, &RequestError{Err: ErrKeyReused,
			Detail: "this Idempotency-Key was already used for a different request; use a new key for a new request"})
	case rec.State == StateCompleted && rec.Response != nil:
		ev.Outcome = OutcomeReplay
		m.observe(r, ev)
		replay(w, *rec.Response)
	case rec.State == StateUnknown:
		ev.Outcome = OutcomeConflict
		m.refuse(w, r, ev, &RequestError{Err: ErrOutcomeUnknown,
			Detail: "the outcome of the original request is unknown and held for an operator; do not retry with a new key before checking"})
	default:
		ev.Outcome = OutcomeConflict
		m.refuse(w, r, ev, &RequestError{Err: ErrKeyInUse,
			Detail: "a request with this Idempotency-Key is still being processed; retry after the delay in Retry-After", RetryAfter: m.retryAfter(rec)})
	}
}

// retryAfter is the time left on the original's lease, between 1s and the
// lease length.
func (m *Middleware) retryAfter(rec Record) time.Duration {
	d := time.Until(rec.LeaseUntil)
	return min(max(d, time.Second), max(m.cfg.Lease, time.Second))
}

// replay writes a stored response. Headers already set by the layers
// outside the middleware (this request's id, its rate limit) are kept.
func replay(w http.ResponseWriter, resp Response) {
	h := w.Header()
	for k, vs := range resp.Header {
		if _, set := h[k]; !set {
			h[k] = slices.Clone(vs)
		}
	}
	h.Set(HeaderReplayed, "true")
	if resp.BodyOmitted {
		h.Set(HeaderBodyOmitted, "true")
	}
	h.Set("Content-Length", strconv.Itoa(len(resp.Body)))
	w.WriteHeader(resp.Status)
	_, _ = w.Write(resp.Body)
}

func (m *Middleware) refuse(w http.ResponseWriter, r *http.Request, ev Event, err error) {
	ev.Err = err
	m.observe(r, ev)
	m.cfg.ErrorHandler(w, r, err)
}

func (m *Middleware) observe(r *http.Request, ev Event) {
	if m.cfg.Observe != nil {
		m.cfg.Observe(r, ev)
	}
}

// storeFailed follows OnStoreError when the claim could not be made.
func (m *Middleware) storeFailed(w http.ResponseWriter, r *http.Request, next http.Handler, scope Scope, err error) {
	if r.Context().Err() != nil {
		return // the client went away; there is nobody to answer
	}
	m.cfg.Logger.ErrorContext(r.Context(), "idempotency store failed",
		"route", scope.Route, "tenant", scope.Tenant, "idempotency_key", scope.Key,
		"policy", string(m.cfg.OnStoreError), "err", err)
	ev := Event{Outcome: OutcomeStoreError, Scope: scope, Err: err}
	if m.cfg.OnStoreError == FailOpen {
		m.observe(r, ev)
		next.ServeHTTP(w, r)
		return
	}
	m.refuse(w, r, ev, &RequestError{Err: ErrStoreUnavailable,
		Detail: "the idempotency store is unavailable; the request was not processed, retry with the same key", RetryAfter: time.Second, Cause: err})
}

// waitInFlight polls (and listens, when the store can notify) until the
// original finishes, then claims again: the result is a replay, a release
// the waiter now owns, or — at the deadline — the in-flight record.
func (m *Middleware) waitInFlight(ctx context.Context, req ClaimRequest, res ClaimResult) (ClaimResult, error) {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.WaitInFlight)
	defer cancel()
	var changed <-chan struct{}
	if w, ok := m.store.(Watcher); ok {
		ch, stop, err := w.Watch(ctx, req.Scope)
		if err == nil {
			defer stop()
			changed = ch
		}
	}
	delay := 20 * time.Millisecond
	timer := time.NewTimer(delay)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return res, nil
		case <-changed:
		case <-timer.C:
			delay = min(2*delay, 500*time.Millisecond)
		}
		timer.Reset(delay)
		next, err := m.store.Claim(ctx, req)
		if err != nil {
			if ctx.Err() != nil {
				return res, nil
			}
			return next, err
		}
		res = next
		if res.Claimed || res.Record.State != StateInFlight || res.Record.Fingerprint != req.Fingerprint {
			return res, nil
		}
	}
}

// execute runs next under the claim and stores or releases its outcome.
func (m *Middleware) execute(w http.ResponseWriter, r *http.Request, next http.Handler, req ClaimRequest, res ClaimResult) {
	attempt := &Attempt{Scope: req.Scope, FencingToken: res.Record.FencingToken, TakeOver: res.TakeOver}
	m.observe(r, Event{Outcome: OutcomeNew, Scope: req.Scope, FencingToken: attempt.FencingToken, TakeOver: attempt.TakeOver})

	// Storing must finish even if the client goes away.
	storeCtx := context.WithoutCancel(r.Context())
	ctx, cancel := context.WithCancelCause(context.WithValue(r.Context(), attemptKey{}, attempt))
	defer cancel(nil)
	rn := m.startRenewing(storeCtx, req, cancel)
	stopRenewing := rn.stop
	rec := &recorder{rw: w, limit: m.cfg.MaxStoredResponseBytes, header: make(http.Header)}
	finished := false
	var early Stored // set when the record was stored before the handler returned
	rec.beforeSend = func(status int) {
		if decide(attempt, status, m.cfg.OnAmbiguous) != StoredCompleted {
			return
		}
		stopRenewing()
		early = m.finish(storeCtx, r, req, attempt, StoredCompleted, rec.response())
	}
	defer func() {
		if finished {
			return
		}
		// The handler panicked: its effect is unknown.
		stopRenewing()
		if early == "" {
			attempt.Ambiguous()
			m.finish(storeCtx, r, req, attempt, decide(attempt, 0, m.cfg.OnAmbiguous), Response{})
		}
	}()

	next.ServeHTTP(rec, r.WithContext(ctx))
	finished = true
	stopRenewing()
	if early == "" {
		resp := rec.response()
		m.finish(storeCtx, r, req, attempt, decide(attempt, resp.Status, m.cfg.OnAmbiguous), resp)
	}
	_ = rec.send()
}

// renewer keeps the lease alive every Lease/3 until stop; a failed
// renewal is retried sooner, so one slow store call does not cost the
// claim. When the claim is lost to someone else the handler's context is
// cancelled. It runs on a timer, not a goroutine of its own: most requests
// end long before the first renewal is due, and then none ever runs.
type renewer struct {
	m      *Middleware
	ctx    context.Context
	req    ClaimRequest
	cancel context.CancelCauseFunc

	mu      sync.Mutex
	stopped bool
	timer   *time.Timer
	running sync.WaitGroup // a renewal in progress
}

func (m *Middleware) startRenewing(ctx context.Context, req ClaimRequest, cancel context.CancelCauseFunc) *renewer {
	rn := &renewer{m: m, ctx: ctx, req: req, cancel: cancel}
	rn.mu.Lock()
	rn.timer = time.AfterFunc(m.cfg.Lease/3, rn.renew)
	rn.mu.Unlock()
	return rn
}

// stop ends the renewals and waits for one in progress; it may be called
// more than once.
func (rn *renewer) stop() {
	rn.mu.Lock()
	rn.stopped = true
	rn.timer.Stop()
	rn.mu.Unlock()
	rn.running.Wait()
}

func (rn *renewer) renew() {
	rn.mu.Lock()
	if rn.stopped {
		rn.mu.Unlock()
		return
	}
	rn.running.Add(1)
	rn.mu.Unlock()
	defer rn.running.Done()

	period := rn.m.cfg.Lease / 3
	err := rn.m.store.Renew(rn.ctx, rn.req.Scope, rn.req.Owner, rn.m.cfg.Lease)
	rn.mu.Lock()
	defer rn.mu.Unlock()
	switch {
	case errors.Is(err, ErrNotOwner):
		rn.cancel(ErrNotOwner)
	case rn.stopped:
	case err != nil:
		rn.m.cfg.Logger.WarnContext(rn.ctx, "idempotency lease renewal failed", "route", rn.req.Scope.Route, "idempotency_key", rn.req.Scope.Key, "err", err)
		rn.timer.Reset(min(period, 100*time.Millisecond))
	default:
		rn.timer.Reset(period)
	}
}

// finish stores what became of the attempt, retrying a failed store write a
// few times. It returns what was stored (StoredLost when nothing could be).
func (m *Middleware) finish(ctx context.Context, r *http.Request, req ClaimRequest, a *Attempt, what Stored, resp Response) Stored {
	var err error
	for try := range 3 {
		if try > 0 {
			time.Sleep(time.Duration(try) * 50 * time.Millisecond)
		}
		switch what {
		case StoredCompleted:
			err = m.store.Complete(ctx, req.Scope, req.Owner, resp, m.cfg.Retention)
		case StoredReleased:
			err = m.store.Release(ctx, req.Scope, req.Owner)
		case StoredHeld:
			err = m.store.MarkUnknown(ctx, req.Scope, req.Owner)
		}
		if err == nil || errors.Is(err, ErrNotOwner) {
			break
		}
	}
	ev := Event{Outcome: OutcomeNew, Scope: req.Scope, FencingToken: a.FencingToken, TakeOver: a.TakeOver, Stored: what, Status: resp.Status}
	if err == nil && what == StoredCompleted && m.cfg.ReplayCache != nil && !resp.BodyOmitted {
		now := time.Now()
		m.cfg.ReplayCache.put(Record{
			Scope: req.Scope, Fingerprint: req.Fingerprint, State: StateCompleted, FencingToken: a.FencingToken,
			Response: &resp, CreatedAt: now, UpdatedAt: now, ExpiresAt: now.Add(m.cfg.Retention),
		})
	}
	if err != nil {
		ev.Stored, ev.Err = StoredLost, err
		m.cfg.Logger.ErrorContext(ctx, "idempotency record not stored; a retry after the lease may run the request again",
			"route", req.Scope.Route, "tenant", req.Scope.Tenant, "idempotency_key", req.Scope.Key,
			"fencing_token", a.FencingToken, "wanted", string(what), "err", err)
	}
	m.observe(r, ev)
	return ev.Stored
}

func newOwner() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
