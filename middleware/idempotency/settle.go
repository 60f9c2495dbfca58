package idempotency

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/idemgate/idemgate/problem"
)

// How the client of an executed request is answered once its outcome has
// been stored, or could not be.
type answer int

const (
	// answerOwn: the handler's own response, stored (or released or held,
	// which store no response).
	answerOwn answer = iota
	// answerRecord: the claim was taken over before the response could be
	// stored; the client gets what the record says (the newer attempt's
	// stored response, or 409 while it runs), never its own stale answer.
	answerRecord
	// answerPending: the store could not take the response in time; it is
	// stored in the background and the client is asked to retry with the
	// same key, which then replays it.
	answerPending
)

// settle stores what became of an attempt and says how to answer its
// client. A failed store write is retried with backoff for up to
// CommitTimeout while the lease keeps being renewed, so a store that blinks
// (a restart, a failover) costs latency, not a re-run. After that the write
// goes on in the background until it succeeds, the claim is lost, or Drain
// gives up; a completed response is then not sent, so that the client
// never holds an answer that another attempt could replace.
func (m *Middleware) settle(ctx context.Context, r *http.Request, req ClaimRequest, a *Attempt, rn *renewer, what Stored, resp Response) answer {
	if what != StoredCompleted {
		ctx = WithReleaseReason(ctx, releaseReason(a, what, resp.Status))
	}
	start := time.Now()
	err := m.storeOutcome(ctx, start.Add(m.cfg.CommitTimeout), req, a, what, resp)
	if err != nil && !errors.Is(err, ErrNotOwner) && m.settleLater(r, req, a, rn, what, resp) {
		if what == StoredCompleted {
			return answerPending
		}
		// A release or a hold answers with the handler's own failure,
		// which already tells the client to retry.
		return answerOwn
	}
	rn.stop()
	if err == nil && what == StoredCompleted {
		// The store counted the retention from its own clock, after start.
		a.expires = a.expiresAt(start, m.cfg.Retention)
	}
	m.settled(ctx, r, req, a, what, resp, err)
	switch {
	case err == nil || what != StoredCompleted:
		return answerOwn
	case errors.Is(err, ErrNotOwner):
		return answerRecord
	}
	return answerPending
}

// storeOutcome writes what became of the attempt, retrying a failed write
// with backoff until it succeeds, the claim is lost (ErrNotOwner), ctx
// ends, or, when until is set, the next try would start after until. A
// completed response is kept for the attempt's retention (RetainAfter).
func (m *Middleware) storeOutcome(ctx context.Context, until time.Time, req ClaimRequest, a *Attempt, what Stored, resp Response) error {
	delay := 25 * time.Millisecond
	for {
		tctx, cancel := m.commitContext(ctx)
		var err error
		switch what {
		case StoredCompleted:
			err = m.store.Complete(tctx, req.Scope, req.Owner, resp, a.retention(m.cfg.Retention))
		case StoredReleased:
			err = m.store.Release(tctx, req.Scope, req.Owner)
		case StoredHeld:
			err = m.store.MarkUnknown(tctx, req.Scope, req.Owner)
		}
		cancel()
		if err == nil || errors.Is(err, ErrNotOwner) || ctx.Err() != nil {
			return err
		}
		if !until.IsZero() && time.Now().Add(delay).After(until) {
			return err
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		delay = min(2*delay, 500*time.Millisecond)
	}
}

// settleLater goes on storing the outcome in the background, the lease
// still renewed by rn. It reports false, doing nothing, once Drain has
// begun.
func (m *Middleware) settleLater(r *http.Request, req ClaimRequest, a *Attempt, rn *renewer, what Stored, resp Response) bool {
	ctx := m.bgCtx
	if what != StoredCompleted {
		// The claim ledger keeps why it was released, also when the
		// release is stored late.
		ctx = WithReleaseReason(ctx, releaseReason(a, what, resp.Status))
	}
	started := m.inBackground(func() {
		err := m.storeOutcome(ctx, time.Time{}, req, a, what, resp)
		rn.stop()
		m.settled(context.WithoutCancel(r.Context()), r, req, a, what, resp, err)
	})
	if started {
		m.cfg.Logger.WarnContext(r.Context(), "idempotency outcome not stored yet: retrying in the background",
			"route", req.Scope.Route, "tenant", req.Scope.Tenant, "idempotency_key", req.Scope.Key,
			"fencing_token", a.FencingToken, "wanted", string(what))
	}
	return started
}

// cachedExpiry is the expiry the replay cache keeps with a record: the one
// the first answer said (a.expires), so that replays from memory say the
// same; a record stored in the background was not answered with one.
func cachedExpiry(a *Attempt, now time.Time, base time.Duration) time.Time {
	if !a.expires.IsZero() {
		return a.expires
	}
	return now.Add(a.retention(base))
}

// settled reports the stored outcome (or its loss) and keeps a completed
// response in the replay cache.
func (m *Middleware) settled(ctx context.Context, r *http.Request, req ClaimRequest, a *Attempt, what Stored, resp Response, err error) {
	ev := Event{Outcome: OutcomeNew, Scope: req.Scope, FencingToken: a.FencingToken, TakeOver: a.TakeOver, Stored: what, Status: resp.Status}
	if err == nil && what == StoredCompleted && m.cfg.ReplayCache != nil && !resp.BodyOmitted {
		now := time.Now()
		m.cfg.ReplayCache.put(Record{
			Scope: req.Scope, Fingerprint: req.Fingerprint, State: StateCompleted, FencingToken: a.FencingToken,
			Response: &resp, CreatedAt: now, UpdatedAt: now, ExpiresAt: cachedExpiry(a, now, m.cfg.Retention),
		})
	}
	if err != nil {
		ev.Stored, ev.Err = StoredLost, err
		msg := "idempotency record not stored; a retry after the lease may run the request again"
		if errors.Is(err, ErrNotOwner) {
			msg = "idempotency claim taken over by a newer attempt; this attempt's outcome was not stored"
		}
		m.cfg.Logger.ErrorContext(ctx, msg,
			"route", req.Scope.Route, "tenant", req.Scope.Tenant, "idempotency_key", req.Scope.Key,
			"fencing_token", a.FencingToken, "wanted", string(what), "err", err)
	}
	m.observe(r, ev)
}

// answerFromRecord answers the client of an attempt whose claim was taken
// over: the record's stored response once there is one, 409 while the
// newer attempt runs.
func (m *Middleware) answerFromRecord(w http.ResponseWriter, r *http.Request, req ClaimRequest) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), m.cfg.StoreTimeout)
	rec, err := m.store.Get(ctx, req.Scope)
	cancel()
	if err != nil {
		m.cfg.ErrorHandler(w, r, &problem.Error{Err: ErrKeyInUse, RetryAfter: time.Second, Cause: err,
			Detail: "a newer attempt took this Idempotency-Key over; retry after the delay in Retry-After to get its outcome"})
		return
	}
	if _, rerr := m.judge(req.Fingerprint, rec); rerr != nil {
		m.cfg.ErrorHandler(w, r, rerr)
		return
	}
	setKeyExpires(w.Header(), rec.ExpiresAt)
	replay(w, *rec.Response)
}

// answerPending asks the client of a processed request whose outcome is
// still being stored to come back for it.
func (m *Middleware) answerPending(w http.ResponseWriter, r *http.Request) {
	m.cfg.ErrorHandler(w, r, &problem.Error{Err: ErrStoreUnavailable, RetryAfter: time.Second,
		Detail: "the request was processed but its outcome could not be stored yet; retry with the same Idempotency-Key to receive it"})
}

// abandonClaim releases, in the background, a claim whose Claim call failed
// without an answer (a timeout): the store may have made it all the same,
// and then the key would be held until the lease expired although nothing
// ran. Release is conditional on the owner, so it cannot touch anyone
// else's claim.
func (m *Middleware) abandonClaim(req ClaimRequest) {
	m.inBackground(func() {
		ctx, cancel := context.WithTimeout(m.bgCtx, m.cfg.CommitTimeout)
		defer cancel()
		_ = m.store.Release(WithReleaseReason(ctx, "the claim's answer was lost: released unused"), req.Scope, req.Owner)
	})
}

// inBackground runs f on a goroutine Drain waits for, and reports false,
// running nothing, once Drain has begun.
func (m *Middleware) inBackground(f func()) bool {
	m.bgMu.Lock()
	defer m.bgMu.Unlock()
	if m.draining {
		return false
	}
	m.bgWG.Go(f)
	return true
}

// Drain waits for the outcomes still being stored in the background
// (requests that ended while the store was failing). When ctx ends first
// it stops retrying them and returns ctx's error: those claims stay in
// flight until their lease expires, and a retry then runs the request
// again. Call it once the server has stopped taking requests; the
// middleware stores nothing in the background afterwards.
func (m *Middleware) Drain(ctx context.Context) error {
	m.bgMu.Lock()
	m.draining = true
	m.bgMu.Unlock()
	done := make(chan struct{})
	go func() {
		m.bgWG.Wait()
		close(done)
	}()
	select {
	case <-done:
		m.stopBackground()
		return nil
	case <-ctx.Done():
		m.stopBackground()
		<-done
		return ctx.Err()
	}
}
