package idempotencytest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/middleware/idempotency"
)

// Option changes what Run checks. There is none yet; the parameter keeps
// Run's signature stable for checks a store may opt into.
type Option func(*options)

type options struct{}

// Run runs every conformance test against stores made by newStore. Each
// subtest gets its own store and its own scopes.
func Run(t *testing.T, newStore func(t *testing.T) idempotency.Store, opts ...Option) {
	t.Helper()
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	_ = o
	k := tokens{floor: time.Now().Add(-time.Hour).UnixMicro()}
	withTokens := func(fn func(*testing.T, idempotency.Store, tokens)) func(*testing.T, idempotency.Store) {
		return func(t *testing.T, s idempotency.Store) { fn(t, s, k) }
	}
	tests := []struct {
		name string
		fn   func(t *testing.T, s idempotency.Store)
	}{
		{"GetMissing", testGetMissing},
		{"ClaimNew", withTokens(testClaimNew)},
		{"ClaimRace", testClaimRace},
		{"CompleteAndReplay", testCompleteAndReplay},
		{"OwnerOnly", testOwnerOnly},
		{"FingerprintMismatch", testFingerprintMismatch},
		{"InFlightNotTakenOver", testInFlightNotTakenOver},
		{"RenewKeepsLease", testRenewKeepsLease},
		{"LeaseExpiryTakeOver", withTokens(testLeaseExpiryTakeOver)},
		{"ReleaseAndReclaim", withTokens(testReleaseAndReclaim)},
		{"FencingMonotonic", withTokens(testFencingMonotonic)},
		{"UnknownAndResolve", withTokens(testUnknownAndResolve)},
		{"Expiry", testExpiry},
		{"LargeBinaryBody", testLargeBinaryBody},
		{"BodyOmitted", testBodyOmitted},
		{"TenantAndRouteIsolation", withTokens(testIsolation)},
		{"ScopeSeparatorsDoNotCollide", testScopeSeparators},
		{"Delete", testDelete},
		{"Watch", testWatch},
		{"Janitor", testJanitor},
		{"RetainAfter", testRetainAfter},
		{"KeyExpires", testKeyExpires},
		{"History", testHistory},
		{"RequestCounts", testRequestCounts},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newStore(t))
		})
	}
}

const (
	lease     = 30 * time.Second
	retention = time.Hour
	// waitFor bounds every poll for a state change; generous on purpose.
	waitFor = 15 * time.Second
)

func newScope() idempotency.Scope {
	return idempotency.Scope{Tenant: "tenant-" + random(), Route: "route", Key: "key-" + random()}
}

func random() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func claimReq(scope idempotency.Scope, fp string) idempotency.ClaimRequest {
	return idempotency.ClaimRequest{Scope: scope, Fingerprint: fp, Owner: random(), Lease: lease, Retention: retention}
}

func mustClaim(t *testing.T, s idempotency.Store, req idempotency.ClaimRequest) idempotency.ClaimResult {
	t.Helper()
	res, err := s.Claim(t.Context(), req)
	if err != nil {
		t.Fatalf("Claim(%+v): %v", req.Scope, err)
	}
	return res
}

func mustGet(t *testing.T, s idempotency.Store, scope idempotency.Scope) idempotency.Record {
	t.Helper()
	rec, err := s.Get(t.Context(), scope)
	if err != nil {
		t.Fatalf("Get(%+v): %v", scope, err)
	}
	return rec
}

// eventually polls cond until it is true or waitFor passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, waitFor)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// tokens checks fencing tokens against what the store promises.
type tokens struct {
	// floor is the least first token: the test's clock in microseconds,
	// an hour back for the store clock's skew.
	floor int64
}

// maxToken bounds every token: 2^53, so that a JavaScript number holds it.
const maxToken = 1 << 53

// first checks the token of a record's first claim: floored by the
// store's clock, so that a record the store lost restarts above every
// token it had issued.
func (k tokens) first(t *testing.T, what string, got int64) {
	t.Helper()
	if got < k.floor || got >= maxToken {
		t.Fatalf("%s: fencing token %d, want the store's clock in microseconds (at least %d) and below 2^53", what, got, k.floor)
	}
}

// next checks the token of a claim that followed one with token prev.
func (k tokens) next(t *testing.T, what string, prev, got int64) {
	t.Helper()
	if got <= prev || got >= maxToken {
		t.Fatalf("%s: fencing token %d, want more than %d and below 2^53", what, got, prev)
	}
}

func sampleResponse() idempotency.Response {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("Location", "/v1/payments/pay_1")
	h.Add("X-Multi", "one")
	h.Add("X-Multi", "two")
	return idempotency.Response{Status: http.StatusCreated, Header: h, Body: []byte(`{"id":"pay_1"}`)}
}

func testGetMissing(t *testing.T, s idempotency.Store) {
	if _, err := s.Get(t.Context(), newScope()); !errors.Is(err, idempotency.ErrNotFound) {
		t.Fatalf("Get of a never-claimed scope: got %v, want ErrNotFound", err)
	}
}

func testClaimNew(t *testing.T, s idempotency.Store, k tokens) {
	scope := newScope()
	req := claimReq(scope, "fp-a")
	res := mustClaim(t, s, req)
	if !res.Claimed || res.TakeOver {
		t.Fatalf("first claim: Claimed=%v TakeOver=%v, want true false", res.Claimed, res.TakeOver)
	}
	k.first(t, "first claim", res.Record.FencingToken)
	rec := mustGet(t, s, scope)
	if rec.State != idempotency.StateInFlight || rec.Owner != req.Owner || rec.Fingerprint != "fp-a" || rec.Scope != scope ||
		rec.FencingToken != res.Record.FencingToken {
		t.Fatalf("record after claim = %+v, want token %d", rec, res.Record.FencingToken)
	}
	if !rec.LeaseUntil.After(time.Now().Add(lease / 2)) {
		t.Fatalf("lease_until %v is not about %v ahead", rec.LeaseUntil, lease)
	}
}

func testClaimRace(t *testing.T, s idempotency.Store) {
	scope := newScope()
	const n = 64
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		claimed int
		errs    []error
	)
	start := make(chan struct{})
	for range n {
		wg.Go(func() {
			<-start
			res, err := s.Claim(context.Background(), claimReq(scope, "fp"))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			if res.Claimed {
				claimed++
			} else if res.Record.State != idempotency.StateInFlight {
				errs = append(errs, errors.New("loser saw state "+string(res.Record.State)))
			}
		})
	}
	close(start)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("concurrent claims: %v", errors.Join(errs...))
	}
	if claimed != 1 {
		t.Fatalf("%d of %d concurrent claims succeeded, want exactly 1", claimed, n)
	}
}

func testCompleteAndReplay(t *testing.T, s idempotency.Store) {
	scope := newScope()
	req := claimReq(scope, "fp")
	token := mustClaim(t, s, req).Record.FencingToken
	want := sampleResponse()
	if err := s.Complete(t.Context(), scope, req.Owner, want, retention); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	res := mustClaim(t, s, claimReq(scope, "fp"))
	if res.Claimed {
		t.Fatal("claim after completion succeeded; want the stored record")
	}
	rec := res.Record
	if rec.State != idempotency.StateCompleted || rec.Response == nil {
		t.Fatalf("record after completion = %+v", rec)
	}
	assertResponse(t, *rec.Response, want)
	if rec.FencingToken != token || rec.Owner != "" {
		t.Fatalf("completed record token=%d owner=%q, want the claim's %d and empty", rec.FencingToken, rec.Owner, token)
	}
	assertResponse(t, *mustGet(t, s, scope).Response, want)
	// Completing twice is refused: the claim ended with the first.
	if err := s.Complete(t.Context(), scope, req.Owner, want, retention); !errors.Is(err, idempotency.ErrNotOwner) {
		t.Fatalf("second Complete: got %v, want ErrNotOwner", err)
	}
}

func assertResponse(t *testing.T, got, want idempotency.Response) {
	t.Helper()
	if got.Status != want.Status || !bytes.Equal(got.Body, want.Body) || got.BodyOmitted != want.BodyOmitted {
		t.Fatalf("response = status %d omitted %v body %d bytes, want status %d omitted %v body %d bytes",
			got.Status, got.BodyOmitted, len(got.Body), want.Status, want.BodyOmitted, len(want.Body))
	}
	for k, vs := range want.Header {
		g := got.Header[http.CanonicalHeaderKey(k)]
		if len(g) != len(vs) {
			t.Fatalf("header %s = %q, want %q", k, g, vs)
		}
		for i := range vs {
			if g[i] != vs[i] {
				t.Fatalf("header %s = %q, want %q", k, g, vs)
			}
		}
	}
	if len(got.Header) != len(want.Header) {
		t.Fatalf("headers = %v, want %v", got.Header, want.Header)
	}
}

func testOwnerOnly(t *testing.T, s idempotency.Store) {
	scope := newScope()
	mustClaim(t, s, claimReq(scope, "fp"))
	ctx := t.Context()
	if err := s.Complete(ctx, scope, "intruder", sampleResponse(), retention); !errors.Is(err, idempotency.ErrNotOwner) {
		t.Fatalf("Complete by non-owner: got %v, want ErrNotOwner", err)
	}
	if err := s.Renew(ctx, scope, "intruder", lease); !errors.Is(err, idempotency.ErrNotOwner) {
		t.Fatalf("Renew by non-owner: got %v, want ErrNotOwner", err)
	}
	if err := s.Release(ctx, scope, "intruder"); !errors.Is(err, idempotency.ErrNotOwner) {
		t.Fatalf("Release by non-owner: got %v, want ErrNotOwner", err)
	}
	if err := s.MarkUnknown(ctx, scope, "intruder"); !errors.Is(err, idempotency.ErrNotOwner) {
		t.Fatalf("MarkUnknown by non-owner: got %v, want ErrNotOwner", err)
	}
	if rec := mustGet(t, s, scope); rec.State != idempotency.StateInFlight || rec.Response != nil {
		t.Fatalf("record changed by a non-owner: %+v", rec)
	}
	missing := newScope()
	if err := s.Complete(ctx, missing, "nobody", sampleResponse(), retention); !errors.Is(err, idempotency.ErrNotOwner) {
		t.Fatalf("Complete of a missing record: got %v, want ErrNotOwner", err)
	}
}

func testFingerprintMismatch(t *testing.T, s idempotency.Store) {
	scope := newScope()
	req := claimReq(scope, "fp-a")
	mustClaim(t, s, req)
	res := mustClaim(t, s, claimReq(scope, "fp-b"))
	if res.Claimed || res.Record.Fingerprint != "fp-a" {
		t.Fatalf("claim with another fingerprint while in flight: %+v", res)
	}
	if err := s.Complete(t.Context(), scope, req.Owner, sampleResponse(), retention); err != nil {
		t.Fatal(err)
	}
	res = mustClaim(t, s, claimReq(scope, "fp-b"))
	if res.Claimed || res.Record.Fingerprint != "fp-a" || res.Record.State != idempotency.StateCompleted {
		t.Fatalf("claim with another fingerprint after completion: %+v", res)
	}
}

func testInFlightNotTakenOver(t *testing.T, s idempotency.Store) {
	scope := newScope()
	first := claimReq(scope, "fp")
	mustClaim(t, s, first)
	res := mustClaim(t, s, claimReq(scope, "fp"))
	if res.Claimed {
		t.Fatal("a live claim was taken over")
	}
	if res.Record.State != idempotency.StateInFlight || res.Record.LeaseUntil.IsZero() {
		t.Fatalf("in-flight record = %+v, want in_flight with a lease", res.Record)
	}
	if res.Record.Owner != first.Owner {
		t.Fatalf("owner = %q, want %q", res.Record.Owner, first.Owner)
	}
}

func testRenewKeepsLease(t *testing.T, s idempotency.Store) {
	scope := newScope()
	short := 800 * time.Millisecond
	req := claimReq(scope, "fp")
	req.Lease = short
	mustClaim(t, s, req)
	// Renew for several lease lengths; a contender never gets the claim.
	until := time.Now().Add(3 * short)
	for time.Now().Before(until) {
		if err := s.Renew(t.Context(), scope, req.Owner, short); err != nil {
			t.Fatalf("Renew: %v", err)
		}
		other := claimReq(scope, "fp")
		other.Lease = short
		if res := mustClaim(t, s, other); res.Claimed {
			t.Fatal("a renewed lease was taken over")
		}
		time.Sleep(short / 8)
	}
	if err := s.Complete(t.Context(), scope, req.Owner, sampleResponse(), retention); err != nil {
		t.Fatalf("Complete after renewals: %v", err)
	}
}

func testLeaseExpiryTakeOver(t *testing.T, s idempotency.Store, k tokens) {
	scope := newScope()
	crashed := claimReq(scope, "fp")
	crashed.Lease = 300 * time.Millisecond
	first := mustClaim(t, s, crashed).Record.FencingToken
	// The first owner "crashes": it never renews. A retry takes over.
	var res idempotency.ClaimResult
	eventually(t, "take-over after the lease expired", func() bool {
		res = mustClaim(t, s, claimReq(scope, "fp"))
		return res.Claimed
	})
	if !res.TakeOver {
		t.Fatal("take-over after the lease expired: TakeOver is false")
	}
	k.next(t, "take-over after the lease expired", first, res.Record.FencingToken)
	if err := s.Complete(t.Context(), scope, crashed.Owner, sampleResponse(), retention); !errors.Is(err, idempotency.ErrNotOwner) {
		t.Fatalf("stale owner's Complete after take-over: got %v, want ErrNotOwner", err)
	}
	// An expired lease with another fingerprint is a mismatch, not a take-over.
	scope2 := newScope()
	c2 := claimReq(scope2, "fp-a")
	c2.Lease = 300 * time.Millisecond
	mustClaim(t, s, c2)
	eventually(t, "lease of the second record expired", func() bool {
		return !mustGet(t, s, scope2).LeaseUntil.After(time.Now().Add(-200 * time.Millisecond))
	})
	if res := mustClaim(t, s, claimReq(scope2, "fp-b")); res.Claimed {
		t.Fatal("an expired lease was taken over by a request with another fingerprint")
	}
}

func testReleaseAndReclaim(t *testing.T, s idempotency.Store, k tokens) {
	scope := newScope()
	req := claimReq(scope, "fp")
	first := mustClaim(t, s, req).Record.FencingToken
	if err := s.Release(t.Context(), scope, req.Owner); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if rec := mustGet(t, s, scope); rec.State != idempotency.StateReleased || rec.Owner != "" {
		t.Fatalf("released record = %+v", rec)
	}
	if err := s.Complete(t.Context(), scope, req.Owner, sampleResponse(), retention); !errors.Is(err, idempotency.ErrNotOwner) {
		t.Fatalf("Complete after Release: got %v, want ErrNotOwner", err)
	}
	if res := mustClaim(t, s, claimReq(scope, "other")); res.Claimed {
		t.Fatal("a released record was claimed by a request with another fingerprint")
	}
	res := mustClaim(t, s, claimReq(scope, "fp"))
	if !res.Claimed || !res.TakeOver {
		t.Fatalf("reclaim after release: %+v, want a claimed take-over", res)
	}
	k.next(t, "reclaim after release", first, res.Record.FencingToken)
}

func testFencingMonotonic(t *testing.T, s idempotency.Store, k tokens) {
	scope := newScope()
	var last int64
	for i := range 6 {
		req := claimReq(scope, "fp")
		if i%2 == 1 {
			req.Lease = 200 * time.Millisecond
		}
		var res idempotency.ClaimResult
		eventually(t, "claim", func() bool {
			res = mustClaim(t, s, req)
			return res.Claimed
		})
		if i == 0 {
			k.first(t, "claim 0", res.Record.FencingToken)
		} else {
			k.next(t, fmt.Sprintf("claim %d", i), last, res.Record.FencingToken)
		}
		last = res.Record.FencingToken
		if i%2 == 0 {
			if err := s.Release(t.Context(), scope, req.Owner); err != nil {
				t.Fatal(err)
			}
		} // odd claims are abandoned and expire
	}
}

func testUnknownAndResolve(t *testing.T, s idempotency.Store, k tokens) {
	ctx := t.Context()
	scope := newScope()
	req := claimReq(scope, "fp")
	first := mustClaim(t, s, req).Record.FencingToken
	if err := s.MarkUnknown(ctx, scope, req.Owner); err != nil {
		t.Fatalf("MarkUnknown: %v", err)
	}
	res := mustClaim(t, s, claimReq(scope, "fp"))
	if res.Claimed || res.Record.State != idempotency.StateUnknown {
		t.Fatalf("claim of an unknown outcome: %+v", res)
	}
	if err := s.Resolve(ctx, scope); err != nil {
		t.Fatalf("Resolve: %v", err)
	}
	if rec := mustGet(t, s, scope); rec.State != idempotency.StateReleased {
		t.Fatalf("resolved record state = %s, want released", rec.State)
	}
	res = mustClaim(t, s, claimReq(scope, "fp"))
	if !res.Claimed {
		t.Fatalf("claim after Resolve: %+v, want claimed", res)
	}
	k.next(t, "claim after Resolve", first, res.Record.FencingToken)
	if err := s.Resolve(ctx, scope); !errors.Is(err, idempotency.ErrNotUnknown) {
		t.Fatalf("Resolve of an in-flight record: got %v, want ErrNotUnknown", err)
	}
	if err := s.Resolve(ctx, newScope()); !errors.Is(err, idempotency.ErrNotFound) {
		t.Fatalf("Resolve of a missing record: got %v, want ErrNotFound", err)
	}
}

func testExpiry(t *testing.T, s idempotency.Store) {
	scope := newScope()
	req := claimReq(scope, "fp-a")
	mustClaim(t, s, req)
	if err := s.Complete(t.Context(), scope, req.Owner, sampleResponse(), 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	eventually(t, "completed record expired", func() bool {
		_, err := s.Get(t.Context(), scope)
		return errors.Is(err, idempotency.ErrNotFound)
	})
	// After retention the key is free again, even for another request.
	res := mustClaim(t, s, claimReq(scope, "fp-b"))
	if !res.Claimed || res.Record.Fingerprint != "fp-b" {
		t.Fatalf("claim after expiry: %+v", res)
	}
}

func testLargeBinaryBody(t *testing.T, s idempotency.Store) {
	scope := newScope()
	req := claimReq(scope, "fp")
	mustClaim(t, s, req)
	body := make([]byte, 1<<20)
	_, _ = rand.Read(body)
	body[0], body[1] = 0, 0xff
	want := idempotency.Response{Status: 200, Header: http.Header{"Content-Type": {"application/octet-stream"}}, Body: body}
	if err := s.Complete(t.Context(), scope, req.Owner, want, retention); err != nil {
		t.Fatalf("Complete with 1 MiB body: %v", err)
	}
	assertResponse(t, *mustGet(t, s, scope).Response, want)
}

func testBodyOmitted(t *testing.T, s idempotency.Store) {
	scope := newScope()
	req := claimReq(scope, "fp")
	mustClaim(t, s, req)
	want := idempotency.Response{Status: 200, Header: http.Header{"Content-Length": {"99999999"}}, BodyOmitted: true}
	if err := s.Complete(t.Context(), scope, req.Owner, want, retention); err != nil {
		t.Fatal(err)
	}
	got := *mustGet(t, s, scope).Response
	if len(got.Body) != 0 {
		t.Fatalf("omitted body stored %d bytes", len(got.Body))
	}
	assertResponse(t, got, want)
}

func testIsolation(t *testing.T, s idempotency.Store, k tokens) {
	base := newScope()
	otherTenant := base
	otherTenant.Tenant += "-other"
	otherRoute := base
	otherRoute.Route += "-other"
	first := claimReq(base, "fp")
	mustClaim(t, s, first)
	if err := s.Complete(t.Context(), base, first.Owner, sampleResponse(), retention); err != nil {
		t.Fatal(err)
	}
	for _, scope := range []idempotency.Scope{otherTenant, otherRoute} {
		res := mustClaim(t, s, claimReq(scope, "fp"))
		if !res.Claimed || res.TakeOver {
			t.Fatalf("same key in %+v: %+v, want a new claim of its own", scope, res)
		}
		k.first(t, fmt.Sprintf("same key in %+v", scope), res.Record.FencingToken)
	}
	if rec := mustGet(t, s, base); rec.State != idempotency.StateCompleted {
		t.Fatalf("original record disturbed: %+v", rec)
	}
}

func testScopeSeparators(t *testing.T, s idempotency.Store) {
	id := random()
	// Scopes whose parts would collide if simply joined with ':' or '/'.
	scopes := []idempotency.Scope{
		{Tenant: id + "a:b", Route: "c", Key: "d"},
		{Tenant: id + "a", Route: "b:c", Key: "d"},
		{Tenant: id + "a", Route: "b", Key: "c:d"},
		{Tenant: id + "a/b", Route: "c", Key: "d}{"},
		{Tenant: id + "a", Route: "b/c", Key: "d}{"},
		{Tenant: id + "ü", Route: "{r}", Key: "\"k\""},
	}
	for _, scope := range scopes {
		res := mustClaim(t, s, claimReq(scope, "fp"))
		if !res.Claimed || res.Record.Scope != scope {
			t.Fatalf("scope %+v collided with another: %+v", scope, res)
		}
	}
}

func testDelete(t *testing.T, s idempotency.Store) {
	scope := newScope()
	mustClaim(t, s, claimReq(scope, "fp"))
	if err := s.Delete(t.Context(), scope); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := s.Get(t.Context(), scope); !errors.Is(err, idempotency.ErrNotFound) {
		t.Fatalf("Get after Delete: got %v, want ErrNotFound", err)
	}
	if res := mustClaim(t, s, claimReq(scope, "other")); !res.Claimed {
		t.Fatal("claim after Delete did not succeed")
	}
	if err := s.Delete(t.Context(), newScope()); err != nil {
		t.Fatalf("Delete of a missing record: %v", err)
	}
}

func testWatch(t *testing.T, s idempotency.Store) {
	w, ok := s.(idempotency.Watcher)
	if !ok {
		t.Skip("store does not implement idempotency.Watcher")
	}
	for _, end := range []string{"complete", "release", "unknown"} {
		t.Run(end, func(t *testing.T) {
			scope := newScope()
			req := claimReq(scope, "fp")
			mustClaim(t, s, req)
			changed, stop, err := w.Watch(t.Context(), scope)
			if err != nil {
				t.Fatalf("Watch: %v", err)
			}
			defer stop()
			var endErr error
			switch end {
			case "complete":
				endErr = s.Complete(t.Context(), scope, req.Owner, sampleResponse(), retention)
			case "release":
				endErr = s.Release(t.Context(), scope, req.Owner)
			case "unknown":
				endErr = s.MarkUnknown(t.Context(), scope, req.Owner)
			}
			if endErr != nil {
				t.Fatal(endErr)
			}
			select {
			case <-changed:
			case <-time.After(waitFor):
				t.Fatalf("no change notified within %s of %s", waitFor, end)
			}
		})
	}
}

func testJanitor(t *testing.T, s idempotency.Store) {
	j, ok := s.(idempotency.Janitor)
	if !ok {
		t.Skip("store expires records by itself (no idempotency.Janitor)")
	}
	var scopes []idempotency.Scope
	for range 5 {
		scope := newScope()
		req := claimReq(scope, "fp")
		mustClaim(t, s, req)
		if err := s.Complete(t.Context(), scope, req.Owner, sampleResponse(), time.Millisecond); err != nil {
			t.Fatal(err)
		}
		scopes = append(scopes, scope)
	}
	live := newScope()
	mustClaim(t, s, claimReq(live, "fp"))
	time.Sleep(50 * time.Millisecond)
	// Other tests share the store, so count only what stays of ours.
	n, err := j.DeleteExpired(t.Context(), 2)
	if err != nil {
		t.Fatalf("DeleteExpired: %v", err)
	}
	if n < 1 || n > 2 {
		t.Fatalf("DeleteExpired(limit 2) deleted %d, want 1 or 2", n)
	}
	eventually(t, "janitor deleted every expired record", func() bool {
		if _, err := j.DeleteExpired(t.Context(), 100); err != nil {
			t.Fatal(err)
		}
		for _, sc := range scopes {
			if _, err := s.Get(t.Context(), sc); !errors.Is(err, idempotency.ErrNotFound) {
				return false
			}
		}
		return true
	})
	if rec := mustGet(t, s, live); rec.State != idempotency.StateInFlight {
		t.Fatalf("janitor touched a live record: %+v", rec)
	}
}
