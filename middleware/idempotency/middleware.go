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
	"strconv"
	"sync"
	"time"

	"github.com/idemgate/idemgate/problem"
)

// HeaderReplayed marks a replayed response.
const HeaderReplayed = "Idempotent-Replayed"

// HeaderKeyExpires says, on every answer the middleware gives under a
// key (a first answer it stored, a replay, a refusal that names an
// existing record), until when the key's record is kept: an HTTP-date,
// at least the record's expiry (rounded down to the second). Until then
// a retry with the key is answered from the record; after it the key is
// free and a request with it runs as new. The IETF Idempotency-Key draft
// names no such field. An answer that stores nothing (a released key, a
// refusal before any record) does not carry it.
const HeaderKeyExpires = "Idempotency-Key-Expires"

// HeaderReplayedX marks a replayed response too, for clients that look for
// the X- prefixed name some implementations of the draft use.
const HeaderReplayedX = "X-Idempotent-Replayed"

// HeaderBodyOmitted marks a replay whose original body was too large to
// store.
const HeaderBodyOmitted = "Idempotent-Body-Omitted"

// Middleware enforces idempotency for one route.
type Middleware struct {
	cfg   Config
	store Store
	fp    *Fingerprinter
	// immediate: the store never blocks, so its calls need no deadline.
	immediate bool

	// Outcomes still being stored after their request ended (settle.go),
	// and claims being let go (abandonClaim). Drain ends them.
	bgCtx          context.Context
	stopBackground context.CancelFunc
	bgMu           sync.Mutex
	draining       bool
	bgWG           sync.WaitGroup
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
	fp, err := NewFingerprinter(cfg.Fingerprint.Headers, cfg.Fingerprint.JSONFields)
	if err != nil {
		return nil, err
	}
	for _, h := range cfg.Fingerprint.HeadersIfPresent {
		fp.ifPresent = append(fp.ifPresent, http.CanonicalHeaderKey(h))
	}
	m := &Middleware{cfg: cfg, store: store, fp: fp}
	_, m.immediate = store.(Immediate)
	m.bgCtx, m.stopBackground = context.WithCancel(context.Background())
	return m, nil
}

// Config returns the effective configuration, defaults filled in.
func (m *Middleware) Config() Config { return m.cfg }

// Wrap returns next guarded by the middleware.
func (m *Middleware) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !m.cfg.needsKey(r.Method) {
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
			err = &problem.Error{Err: ErrKeyMissing, Detail: r.Method + " requests to this route need an Idempotency-Key header"}
		}
		m.refuse(w, r, Event{Outcome: outcome}, err)
		return
	}
	scope := Scope{Tenant: m.cfg.Tenant(r), Route: m.cfg.Route, Key: key}

	body, err := m.readBody(r)
	if err != nil {
		outcome := OutcomeTooLarge
		if errors.Is(err, ErrEncodingRefused) {
			outcome = OutcomeEncodingRefused
		}
		m.refuse(w, r, Event{Outcome: outcome, Scope: scope}, err)
		return
	}
	fingerprint, err := m.fp.Fingerprint(FingerprintInput{
		Method: r.Method, Route: m.cfg.Route, Path: r.URL.Path, RawQuery: r.URL.RawQuery,
		ContentType: r.Header.Get("Content-Type"), Header: r.Header, Body: body,
	})
	if err != nil {
		m.refuse(w, r, Event{Outcome: OutcomeInvalidBody, Scope: scope}, invalidBody(err))
		return
	}

	if rec, ok := m.cfg.ReplayCache.get(scope); ok {
		m.answerExisting(w, r, fingerprint, rec)
		return
	}
	req := ClaimRequest{Scope: scope, Fingerprint: fingerprint, Owner: newOwner(), Lease: m.cfg.Lease, Retention: m.cfg.Retention}
	res, sent, err := m.claim(r.Context(), req)
	if err == nil && !res.Claimed && res.Record.State == StateInFlight && res.Record.Fingerprint == fingerprint && m.cfg.WaitInFlight > 0 {
		res, sent, err = m.waitInFlight(r.Context(), req, res)
	}
	if err != nil {
		m.storeFailed(w, r, next, req, err)
		return
	}
	if !res.Claimed {
		m.cfg.ReplayCache.put(res.Record)
		m.answerExisting(w, r, fingerprint, res.Record)
		return
	}
	m.execute(w, r, next, req, res, sent)
}

// claim makes one Claim call bounded by CommitTimeout and returns when it
// was sent, where the lease it may grant begins.
func (m *Middleware) claim(ctx context.Context, req ClaimRequest) (ClaimResult, time.Time, error) {
	sent := time.Now()
	ctx, cancel := m.commitContext(ctx)
	defer cancel()
	res, err := m.store.Claim(ctx, req)
	return res, sent, err
}

func (m *Middleware) readBody(r *http.Request) ([]byte, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	limit := m.cfg.MaxRequestBytes
	if r.ContentLength > limit {
		return nil, tooLarge(limit)
	}
	src, declared := io.Reader(r.Body), r.ContentLength
	coding, err := m.decoding(r.Header)
	if err != nil {
		return nil, err
	}
	if coding != nil {
		// The encoded bytes are bounded as the body is, and what they
		// inflate to is read no further than the limit.
		src, err = coding(&bounded{r: r.Body, n: limit})
		if err == nil {
			src, declared = &bounded{r: src, n: limit}, -1
		}
	}
	var body []byte
	if err == nil {
		body, err = readAtMost(src, declared, limit+1)
	}
	_ = r.Body.Close()
	switch {
	case errors.Is(err, errOverLimit):
		return nil, tooLarge(limit)
	case err != nil && coding != nil:
		return nil, badEncoding(err)
	case err != nil:
		return nil, &problem.Error{Err: ErrRequestTooLarge, Detail: "the request body could not be read", Cause: err}
	}
	if int64(len(body)) > limit {
		return nil, tooLarge(limit)
	}
	if coding != nil {
		r.Header.Del("Content-Encoding")
		r.Header.Del("Content-Length")
	}
	rb := &readBody{}
	rb.Reset(body)
	r.Body = rb
	r.ContentLength = int64(len(body))
	return body, nil
}

// readBody is a read body handed on to the handler: a bytes.Reader that
// closes, in one allocation.
type readBody struct{ bytes.Reader }

func (*readBody) Close() error { return nil }

// readAtMost reads body up to max bytes. With a small length declared it
// reads into a buffer of that size at once (one allocation, where
// io.ReadAll grows its buffer from 512 bytes); a larger one is not
// allocated before its bytes arrive, so that a declared length alone
// costs nothing. A body longer than declared still shows, as a read past
// the declared length.
func readAtMost(body io.Reader, declared, max int64) ([]byte, error) {
	const presized = 32 << 10
	if declared < 0 || declared >= max || declared > presized {
		return io.ReadAll(io.LimitReader(body, max))
	}
	buf := make([]byte, declared+1)
	n, err := io.ReadFull(body, buf)
	switch {
	case err == io.ErrUnexpectedEOF || err == io.EOF:
		return buf[:n], nil
	case err != nil:
		return nil, err
	}
	// More than declared: read on like io.ReadAll would, up to max.
	rest, err := io.ReadAll(io.LimitReader(body, max-int64(n)))
	return append(buf[:n], rest...), err
}

func tooLarge(limit int64) error {
	return &problem.Error{Err: ErrRequestTooLarge, Detail: fmt.Sprintf("the request body is larger than %d bytes", limit)}
}

// answerExisting answers a request whose key has a record it did not claim.
func (m *Middleware) answerExisting(w http.ResponseWriter, r *http.Request, fingerprint string, rec Record) {
	setKeyExpires(w.Header(), rec.ExpiresAt)
	ev, err := m.judge(fingerprint, rec)
	if err != nil {
		m.refuse(w, r, ev, err)
		return
	}
	m.observe(r, ev)
	replay(w, *rec.Response)
}

// judge decides the answer from an existing record: a replay of its
// stored response (a nil error) or the refusal to send.
func (m *Middleware) judge(fingerprint string, rec Record) (Event, error) {
	ev := Event{Scope: rec.Scope, FencingToken: rec.FencingToken}
	switch {
	case rec.Fingerprint != fingerprint:
		ev.Outcome = OutcomeMismatch
		return ev, &problem.Error{Err: ErrKeyReused,
			Detail: "this Idempotency-Key was already used for a different request; use a new key for a new request"}
	case rec.State == StateCompleted && rec.Response != nil:
		ev.Outcome = OutcomeReplay
		return ev, nil
	case rec.State == StateUnknown:
		ev.Outcome = OutcomeConflict
		return ev, &problem.Error{Err: ErrOutcomeUnknown,
			Detail: "the outcome of the original request is unknown and held for an operator; do not retry with a new key before checking"}
	}
	ev.Outcome = OutcomeConflict
	return ev, &problem.Error{Err: ErrKeyInUse,
		Detail: "a request with this Idempotency-Key is still being processed; retry after the delay in Retry-After", RetryAfter: m.retryAfter(rec)}
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
	// Every value written here shares one backing array: the stored
	// response's own values (the record may be cached and replayed again,
	// so they are copied), then the replay marks and the length. Each
	// header's slice is capped, so an Add on one cannot reach the next.
	n := 4
	for _, vs := range resp.Header {
		n += len(vs)
	}
	all := make([]string, 0, n)
	set := func(k string, vs ...string) {
		i := len(all)
		all = append(all, vs...)
		h[k] = all[i:len(all):len(all)]
	}
	for k, vs := range resp.Header {
		if _, ok := h[k]; !ok {
			set(k, vs...)
		}
	}
	set(HeaderReplayed, "true")
	set(HeaderReplayedX, "true")
	if resp.BodyOmitted {
		set(HeaderBodyOmitted, "true")
	}
	set("Content-Length", strconv.Itoa(len(resp.Body)))
	w.WriteHeader(resp.Status)
	_, _ = w.Write(resp.Body)
}

func (m *Middleware) refuse(w http.ResponseWriter, r *http.Request, ev Event, err error) {
	var re *problem.Error
	if errors.As(err, &re) && re.Key == "" {
		re.Key = ev.Scope.Key // the problem names the key it refuses
	}
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
func (m *Middleware) storeFailed(w http.ResponseWriter, r *http.Request, next http.Handler, req ClaimRequest, err error) {
	scope := req.Scope
	notDurable := errors.Is(err, ErrNotDurable)
	if notDurable || errors.Is(err, context.DeadlineExceeded) {
		// No answer in time: the claim may have been made all the same.
		// Not durable: it was made, and a failover may lose it; nothing
		// ran, so it is let go rather than held until its lease ends.
		m.abandonClaim(req)
	}
	if r.Context().Err() != nil {
		return // the client went away; there is nobody to answer
	}
	if errors.Is(err, ErrStoreFull) {
		// Not a failure of the store, and never passed through: running
		// the request unrecorded is what the bound is there to prevent.
		m.refuse(w, r, Event{Outcome: OutcomeStoreFull, Scope: scope}, &problem.Error{Err: ErrStoreFull,
			Detail:     "the idempotency store is full; the request was not processed, retry with the same key later",
			RetryAfter: StoreFullRetryAfter, Cause: err})
		return
	}
	m.cfg.Logger.ErrorContext(r.Context(), "idempotency store failed",
		"route", scope.Route, "tenant", scope.Tenant, "idempotency_key", scope.Key,
		"policy", string(m.cfg.OnStoreError), "err", err)
	ev := Event{Outcome: OutcomeStoreError, Scope: scope, Err: err}
	if m.cfg.OnStoreError == FailOpen && !notDurable {
		// A store that answered but could not make the claim durable is
		// not a store that failed: the request runs only once its claim
		// would survive a failover, which is what asked for the wait.
		m.observe(r, ev)
		next.ServeHTTP(w, r)
		return
	}
	m.refuse(w, r, ev, &problem.Error{Err: ErrStoreUnavailable,
		Detail: "the idempotency store is unavailable; the request was not processed, retry with the same key", RetryAfter: time.Second, Cause: err})
}

// StoreFullRetryAfter is the Retry-After of a refusal for a full store:
// room comes back only as records expire, so an immediate retry is
// pointless.
const StoreFullRetryAfter = 5 * time.Second

// waitInFlight polls (and listens, when the store can notify) until the
// original finishes, then claims again: the result is a replay, a release
// the waiter now owns, or — at the deadline — the in-flight record.
func (m *Middleware) waitInFlight(ctx context.Context, req ClaimRequest, res ClaimResult) (ClaimResult, time.Time, error) {
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
	var sent time.Time
	for {
		select {
		case <-ctx.Done():
			return res, sent, nil
		case <-changed:
		case <-timer.C:
			delay = min(2*delay, 500*time.Millisecond)
		}
		timer.Reset(delay)
		next, at, err := m.claim(ctx, req)
		if err != nil {
			if ctx.Err() != nil {
				return res, sent, nil
			}
			return next, at, err
		}
		res, sent = next, at
		if res.Claimed || res.Record.State != StateInFlight || res.Record.Fingerprint != req.Fingerprint {
			return res, sent, nil
		}
	}
}

// execute runs next under the claim and stores or releases its outcome.
// sent is when the claim was sent: the lease runs from then.
func (m *Middleware) execute(w http.ResponseWriter, r *http.Request, next http.Handler, req ClaimRequest, res ClaimResult, sent time.Time) {
	e := &execution{m: m, r: r, req: req,
		attempt: Attempt{Scope: req.Scope, FencingToken: res.Record.FencingToken, TakeOver: res.TakeOver}}
	attempt := &e.attempt
	attempt.lease.begin(sent, m.cfg.Lease)
	m.observe(r, Event{Outcome: OutcomeNew, Scope: req.Scope, FencingToken: attempt.FencingToken, TakeOver: attempt.TakeOver})

	// Storing must finish even if the client goes away.
	e.storeCtx = context.WithoutCancel(r.Context())
	e.ctx = attemptContext{Context: r.Context(), attempt: attempt}
	ctx, cancel := context.WithCancelCause(&e.ctx)
	defer cancel(nil)
	rn := &e.rn
	m.startRenewing(rn, e.storeCtx, req, attempt, cancel)
	rec := &e.rec
	rec.rw, rec.limit, rec.header, rec.gate = w, m.cfg.MaxStoredResponseBytes, make(http.Header), e
	finished := false
	defer func() {
		if finished || e.settled {
			return
		}
		// The handler panicked: its effect is unknown.
		attempt.Ambiguous()
		m.settle(e.storeCtx, r, req, attempt, rn, decide(attempt, 0, m.cfg.OnAmbiguous), Response{})
	}()

	next.ServeHTTP(rec, r.WithContext(ctx))
	finished = true
	if !e.settled {
		resp := rec.response()
		e.ans = m.settle(e.storeCtx, r, req, attempt, rn, decide(attempt, resp.Status, m.cfg.OnAmbiguous), resp)
	}
	switch {
	case rec.sent:
		// Streamed: the client has had the response as it came.
	case e.ans == answerRecord:
		m.answerFromRecord(w, r, req)
	case e.ans == answerPending:
		m.answerPending(w, r)
	default:
		// Set after the response was stored: a replay carries the
		// record's own expiry, never a copy of this one.
		setKeyExpires(rec.header, attempt.expires)
		_ = rec.send()
	}
}

// setKeyExpires sets HeaderKeyExpires to t; a zero t (nothing kept)
// removes it.
func setKeyExpires(h http.Header, t time.Time) {
	if t.IsZero() {
		h.Del(HeaderKeyExpires)
		return
	}
	h.Set(HeaderKeyExpires, t.UTC().Format(http.TimeFormat))
}

// execution is the state of one executed attempt — the attempt, the
// context its handler runs under, the lease's renewer and the recorder —
// in one allocation instead of one each.
type execution struct {
	m        *Middleware
	r        *http.Request
	req      ClaimRequest
	storeCtx context.Context
	attempt  Attempt
	ctx      attemptContext
	rn       renewer
	rec      recorder
	settled  bool   // the outcome was stored before the handler returned
	ans      answer // how to answer the client
}

// beforeSend is the recorder's gate (sendGate): a response about to go out
// before the handler returned is stored first, when it is to be stored.
func (e *execution) beforeSend(status int) bool {
	m := e.m
	if decide(&e.attempt, status, m.cfg.OnAmbiguous) != StoredCompleted {
		return true
	}
	e.settled = true
	e.ans = m.settle(e.storeCtx, e.r, e.req, &e.attempt, &e.rn, StoredCompleted, e.rec.response())
	setKeyExpires(e.rec.header, e.attempt.expires)
	return e.ans == answerOwn
}

// attemptContext carries the attempt to the handler (AttemptFrom).
type attemptContext struct {
	context.Context
	attempt *Attempt
}

func (c *attemptContext) Value(key any) any {
	if _, ok := key.(attemptKey); ok {
		return c.attempt
	}
	return c.Context.Value(key)
}

func newOwner() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	var h [32]byte
	hex.Encode(h[:], b[:])
	return string(h[:])
}

// commitContext bounds one store write that commits by CommitTimeout
// (see Config.CommitTimeout), except for a store that never blocks
// (Immediate), which could not overrun it: the deadline would cost a timer
// and two contexts per call for nothing.
func (m *Middleware) commitContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if m.immediate {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, m.cfg.CommitTimeout)
}
