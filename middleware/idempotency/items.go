package idempotency

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/idemgate/idemgate/problem"
)

// Item is a request carried inside another one, an item of a batch, that
// is answered under this route's keys as if it had been sent alone: it
// is fingerprinted as that request would be, so a request sent alone
// later with its key replays its answer, and an item whose key a request
// sent alone used replays that request's answer.
type Item struct {
	// Key is the item's key, checked by ItemKey.
	Key string
	// Method, Path, ContentType, Header and Body are the request the
	// item stands for. Only the route's fingerprint headers are read.
	Method, Path, ContentType string
	Header                    http.Header
	Body                      []byte
}

// ItemClaim is where one item stands after ClaimItems.
type ItemClaim struct {
	Scope       Scope
	Fingerprint string
	// Claimed: the caller runs the item, then calls CompleteItem or
	// ReleaseItems.
	Claimed bool
	// Replay is the answer stored for the key by the request (or item)
	// that used it first, to answer the item with. Set when the item is
	// neither claimed nor refused.
	Replay *Response
	// Err refuses the item, a *problem.Error: its key was used for
	// another request (ErrKeyReused), that request is still running
	// (ErrKeyInUse), its outcome is held (ErrOutcomeUnknown), or its body
	// cannot be fingerprinted.
	Err error

	owner string
	// fencingToken is the claim's, for the observer.
	fencingToken int64
}

// ItemStore is implemented by stores that claim many records in one round
// trip. ClaimMany answers like Claim for each request, in order; the
// middleware claims item by item with a store that lacks it.
type ItemStore interface {
	ClaimMany(ctx context.Context, reqs []ClaimRequest) ([]ClaimResult, error)
}

// ItemCompleter is implemented by stores that store many answers in one
// round trip. CompleteMany answers like Complete for each item, in order.
type ItemCompleter interface {
	CompleteMany(ctx context.Context, items []ItemCompletion) []error
}

// ItemCompletion is one answer for CompleteMany.
type ItemCompletion struct {
	Scope     Scope
	Owner     string
	Response  Response
	Retention time.Duration
}

// ErrItemsUnsupported is what a wrapper of a store (one that measures its
// calls) returns from ClaimMany, or alone from CompleteMany, when the
// store it wraps does not implement it: the middleware then goes item by
// item.
var ErrItemsUnsupported = errors.New("idempotency: the store claims one record at a time")

// itemConcurrency bounds the store calls ClaimItems, CompleteItems and
// ReleaseItems make at once for one batch on a store without ItemStore.
const itemConcurrency = 128

// ItemKey checks an item's key as the Idempotency-Key header carrying it
// would be checked, and returns it. The error is a *problem.Error wrapping
// ErrKeyInvalid.
func (m *Middleware) ItemKey(key string) (string, error) {
	quoted := `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(key) + `"`
	k, err := ParseKey([]string{quoted}, KeyStrict, m.cfg.MaxKeyLength)
	if err == nil && k != key {
		err = invalidKey("the key has characters an Idempotency-Key header cannot carry")
	}
	return k, err
}

// ClaimItems claims the record of each item under tenant, in this route's
// scope, as the middleware claims a request's: each claimed one must end
// with CompleteItem or ReleaseItems. An item that is not claimed is
// answered from its record (Replay) or refused (Err). The error is the
// store's: every claim made is then released, and nothing is claimed.
func (m *Middleware) ClaimItems(ctx context.Context, tenant string, items []Item) ([]ItemClaim, error) {
	claims := make([]ItemClaim, len(items))
	reqs := make([]ClaimRequest, 0, len(items))
	at := make([]int, 0, len(items))
	for i, it := range items {
		c := &claims[i]
		c.Scope = Scope{Tenant: tenant, Route: m.cfg.Route, Key: it.Key}
		fp, err := m.fp.Fingerprint(FingerprintInput{
			Method: it.Method, Route: m.cfg.Route, Path: it.Path,
			ContentType: it.ContentType, Header: it.Header, Body: it.Body,
		})
		if err != nil {
			c.Err = invalidBody(err)
			continue
		}
		c.Fingerprint = fp
		if rec, ok := m.cfg.ReplayCache.get(c.Scope); ok {
			m.judgeItem(c, rec)
			continue
		}
		c.owner = newOwner()
		reqs = append(reqs, ClaimRequest{Scope: c.Scope, Fingerprint: fp, Owner: c.owner, Lease: m.cfg.Lease, Retention: m.cfg.Retention})
		at = append(at, i)
	}
	results, err := m.claimMany(ctx, reqs)
	if err != nil {
		// A claim whose answer was lost may have been made: let every
		// one go.
		for _, req := range reqs {
			m.abandonClaim(req)
		}
		return nil, err
	}
	for k, res := range results {
		c := &claims[at[k]]
		if res.Claimed {
			c.Claimed, c.fencingToken = true, res.Record.FencingToken
			continue
		}
		m.cfg.ReplayCache.put(res.Record)
		m.judgeItem(c, res.Record)
	}
	return claims, nil
}

// judgeItem answers an item from a record it did not claim.
func (m *Middleware) judgeItem(c *ItemClaim, rec Record) {
	if _, err := m.judge(c.Fingerprint, rec); err != nil {
		var re *problem.Error
		if errors.As(err, &re) {
			re.Key = c.Scope.Key
		}
		c.Err = err
		return
	}
	resp := *rec.Response
	c.Replay = &resp
}

// claimMany claims reqs in one call of an ItemStore, or a few at a time.
func (m *Middleware) claimMany(ctx context.Context, reqs []ClaimRequest) ([]ClaimResult, error) {
	if len(reqs) == 0 {
		return nil, nil
	}
	if is, ok := m.store.(ItemStore); ok {
		cctx, cancel := m.commitContext(ctx)
		res, err := is.ClaimMany(cctx, reqs)
		cancel()
		if !errors.Is(err, ErrItemsUnsupported) {
			return res, err
		}
	}
	results := make([]ClaimResult, len(reqs))
	errs := make([]error, len(reqs))
	m.each(len(reqs), func(i int) {
		results[i], _, errs[i] = m.claim(ctx, reqs[i])
	})
	return results, errors.Join(errs...)
}

// each runs f for 0..n-1, itemConcurrency at a time, and returns when
// every call has.
func (m *Middleware) each(n int, f func(i int)) {
	var wg sync.WaitGroup
	slots := make(chan struct{}, itemConcurrency)
	for i := range n {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			f(i)
		})
	}
	wg.Wait()
}

// ItemOutcome is the answer to store for one claimed item.
type ItemOutcome struct {
	Claim    ItemClaim
	Response Response
	// RetainAfter, when later than now, keeps the answer for the
	// retention after it instead of after now (Attempt.RetainAfter).
	RetainAfter time.Time
}

// CompleteItems stores each outcome as its item's answer, which every
// later request with its key replays. It returns the failures joined: an
// item whose answer was not stored stays claimed until its lease ends,
// and a retry then runs it again.
func (m *Middleware) CompleteItems(ctx context.Context, outs []ItemOutcome) error {
	if ic, ok := m.store.(ItemCompleter); ok {
		items := make([]ItemCompletion, len(outs))
		for i, o := range outs {
			var a Attempt
			a.RetainAfter(o.RetainAfter)
			items[i] = ItemCompletion{Scope: o.Claim.Scope, Owner: o.Claim.owner, Response: o.Response, Retention: a.retention(m.cfg.Retention)}
		}
		cctx, cancel := m.commitContext(ctx)
		errs := ic.CompleteMany(cctx, items)
		cancel()
		if len(errs) != 1 || !errors.Is(errs[0], ErrItemsUnsupported) {
			return errors.Join(errs...)
		}
	}
	errs := make([]error, len(outs))
	m.each(len(outs), func(i int) {
		o := outs[i]
		var a Attempt
		a.RetainAfter(o.RetainAfter)
		ctx, cancel := m.commitContext(ctx)
		defer cancel()
		errs[i] = m.store.Complete(ctx, o.Claim.Scope, o.Claim.owner, o.Response, a.retention(m.cfg.Retention))
	})
	return errors.Join(errs...)
}

// ReleaseItems lets the claimed items of claims go unused, so that the
// next request with one of their keys runs.
func (m *Middleware) ReleaseItems(ctx context.Context, claims []ItemClaim) error {
	errs := make([]error, len(claims))
	m.each(len(claims), func(i int) {
		c := claims[i]
		if !c.Claimed {
			return
		}
		ctx, cancel := m.commitContext(ctx)
		defer cancel()
		errs[i] = m.store.Release(WithReleaseReason(ctx, "the batch holding the item was refused"), c.Scope, c.owner)
	})
	return errors.Join(errs...)
}
