package idempotencytest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/lincheck"
	"github.com/idemgate/idemgate/middleware/idempotency"
)

// The size of CheckHistory's run: a few hundred calls, a few seconds on
// any store.
const (
	historyScopes  = 4 // scopes of the contended phase
	historyWorkers = 4 // concurrent callers per scope
	historyRounds  = 8 // claims of each scope by every caller
	expiryScopes   = 3 // scopes of the expired-lease phase
	shortLease     = 300 * time.Millisecond
	// historyCheck bounds the check of one scope's history.
	historyCheck = 30 * time.Second
)

// CheckHistory calls s from concurrent goroutines, records every call and
// what it returned, and checks the history against StoreModel. Two
// phases, on scopes of their own:
//
//   - contended: in each round every caller claims the scope at once;
//     the winner renews, waits until every loser has claimed, tried to
//     renew, complete or release with its own owner and read the record,
//     then releases (a later round takes over), completes or marks the
//     outcome unknown (the last rounds). Leases outlast the run.
//   - expired: an owner claims with a short lease and stops; once the
//     lease has passed on any clock, callers claim at once while the
//     stale owner completes.
//
// An error other than ErrNotOwner or ErrNotFound is returned as an error:
// the model cannot tell what such a call did.
func CheckHistory(ctx context.Context, s idempotency.Store) (lincheck.Result, error) {
	rec := lincheck.NewRecorder()
	c := &caller{s: s, rec: rec}
	var wg sync.WaitGroup
	for i := range historyScopes {
		scope := newScope()
		wg.Go(func() { c.contend(ctx, scope, i) })
	}
	for range expiryScopes {
		scope := newScope()
		wg.Go(func() { c.expire(ctx, scope) })
	}
	wg.Wait()
	if err := errors.Join(c.errs...); err != nil {
		return lincheck.Result{}, err
	}
	return lincheck.Check(StoreModel(), rec.Operations(), historyCheck), nil
}

// caller makes recorded calls to a store.
type caller struct {
	s   idempotency.Store
	rec *lincheck.Recorder

	mu   sync.Mutex
	errs []error
}

// do records one call: run makes it and turns its return into the
// model's output.
func (c *caller) do(client int, scope idempotency.Scope, in call, run func() (result, bool)) result {
	done := c.rec.Begin(client, scopeKey(scope), in)
	out, ok := run()
	if !ok {
		c.mu.Lock()
		c.errs = append(c.errs, fmt.Errorf("%s %s: %s", in.op, scopeKey(scope), out.err))
		c.mu.Unlock()
		return out // left out of the history: its effect is unknown
	}
	done(out)
	return out
}

func (c *caller) claim(ctx context.Context, client int, scope idempotency.Scope, owner, fp string, lease time.Duration) result {
	return c.do(client, scope, call{op: "claim", owner: owner, fingerprint: fp}, func() (result, bool) {
		res, err := c.s.Claim(ctx, idempotency.ClaimRequest{Scope: scope, Fingerprint: fp, Owner: owner, Lease: lease, Retention: retention})
		return outcome(nil, &res, err)
	})
}

// end makes one of the calls that need the claim: renew, complete,
// release or unknown.
func (c *caller) end(ctx context.Context, client int, scope idempotency.Scope, op, owner string) result {
	in := call{op: op, owner: owner}
	if op == "complete" {
		in.body = "by " + short(owner)
	}
	return c.do(client, scope, in, func() (result, bool) {
		var err error
		switch op {
		case "renew":
			err = c.s.Renew(ctx, scope, owner, lease)
		case "complete":
			err = c.s.Complete(ctx, scope, owner, idempotency.Response{Status: http.StatusCreated, Body: []byte(in.body)}, retention)
		case "release":
			err = c.s.Release(ctx, scope, owner)
		case "unknown":
			err = c.s.MarkUnknown(ctx, scope, owner)
		}
		return outcome(nil, nil, err)
	})
}

func (c *caller) get(ctx context.Context, client int, scope idempotency.Scope) {
	c.do(client, scope, call{op: "get"}, func() (result, bool) {
		rec, err := c.s.Get(ctx, scope)
		return outcome(&rec, nil, err)
	})
}

// contend runs the contended phase on scope; n varies how the scope's
// rounds end.
func (c *caller) contend(ctx context.Context, scope idempotency.Scope, n int) {
	stale := []string{"renew", "complete", "release"}
	for round := range historyRounds {
		var losers, all sync.WaitGroup
		losers.Add(historyWorkers)
		for w := range historyWorkers {
			all.Go(func() {
				owner := random()
				fp := "fp"
				if w == 0 && round%2 == 1 {
					fp = "fp-other" // never claims: the record has another fingerprint
				}
				if !c.claim(ctx, w, scope, owner, fp, lease).claimed {
					c.end(ctx, w, scope, stale[(w+round)%len(stale)], owner)
					c.get(ctx, w, scope)
					losers.Done()
					return
				}
				c.end(ctx, w, scope, "renew", owner)
				losers.Done()
				losers.Wait()
				switch {
				case round < historyRounds-2:
					c.end(ctx, w, scope, "release", owner)
				case n%2 == 1:
					c.end(ctx, w, scope, "unknown", owner)
				default:
					c.end(ctx, w, scope, "complete", owner)
				}
				c.get(ctx, w, scope)
			})
		}
		all.Wait()
	}
}

// expire runs the expired-lease phase on scope.
func (c *caller) expire(ctx context.Context, scope idempotency.Scope) {
	owner := random()
	c.claim(ctx, 0, scope, owner, "fp", shortLease)
	// Past the lease on the store's clock as on this one: the stores
	// compare leases with their own time, on this host.
	time.Sleep(3 * shortLease)
	now := time.Now()
	c.rec.Add(lincheck.Operation{Client: -1, Key: scopeKey(scope), Input: call{op: "expire"}, Output: result{}, Call: now, Return: now})
	var wg sync.WaitGroup
	wg.Go(func() { c.end(ctx, 0, scope, "complete", owner) })
	for w := 1; w <= historyWorkers; w++ {
		wg.Go(func() {
			mine := random()
			if c.claim(ctx, w, scope, mine, "fp", lease).claimed {
				c.end(ctx, w, scope, "complete", mine)
			}
			c.get(ctx, w, scope)
		})
	}
	wg.Wait()
}

func scopeKey(s idempotency.Scope) string { return s.Tenant + "/" + s.Route + "/" + s.Key }

// testHistory: concurrent histories of the store's calls are explained by
// StoreModel.
func testHistory(t *testing.T, s idempotency.Store) {
	res, err := CheckHistory(t.Context(), s)
	if err != nil {
		t.Fatalf("history: %v", err)
	}
	if !res.Ok() || len(res.Unchecked) > 0 {
		t.Fatalf("the store's history breaks the store model:\n%s", res)
	}
	if res.Operations < 200 {
		t.Fatalf("history of %d calls, want a few hundred", res.Operations)
	}
	t.Logf("%s", res)
}
