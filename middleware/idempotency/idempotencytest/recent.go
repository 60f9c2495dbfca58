package idempotencytest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/idemgate/idemgate/middleware/idempotency"
)

// Lister is a store that lists the recent keys of a tenant and route, as
// the operator console asks of pgstore and memstore.
type Lister interface {
	idempotency.Store
	Recent(ctx context.Context, tenant, route string, state idempotency.State, limit int) ([]idempotency.Record, error)
}

// Recent checks a Lister: only the tenant and route asked, the most
// recently written first, filtered by state, at most limit, with each
// record's state and stored status and without its body.
func Recent(t *testing.T, s Lister) {
	t.Helper()
	ctx := t.Context()
	scope := func(tenant, route, key string) idempotency.Scope {
		return idempotency.Scope{Tenant: tenant, Route: route, Key: key}
	}
	claim := func(sc idempotency.Scope) {
		t.Helper()
		if res, err := s.Claim(ctx, idempotency.ClaimRequest{Scope: sc, Fingerprint: "fp", Owner: "o-" + sc.Key, Lease: time.Minute, Retention: time.Hour}); err != nil || !res.Claimed {
			t.Fatalf("claim %v: %+v %v", sc, res, err)
		}
	}
	for _, k := range []string{"k1", "k2", "k3"} {
		claim(scope("acme", "payments", k))
		time.Sleep(5 * time.Millisecond) // written one after the other
	}
	claim(scope("globex", "payments", "g1"))
	claim(scope("acme", "refunds", "r1"))
	if err := s.Complete(ctx, scope("acme", "payments", "k1"), "o-k1", idempotency.Response{Status: 201, Body: []byte("made")}, time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, scope("acme", "payments", "k2"), "o-k2"); err != nil {
		t.Fatal(err)
	}

	keys := func(recs []idempotency.Record) []string {
		var out []string
		for _, r := range recs {
			out = append(out, r.Scope.Key+":"+string(r.State))
		}
		return out
	}
	all, err := s.Recent(ctx, "acme", "payments", "", 10)
	if err != nil {
		t.Fatal(err)
	}
	// k2 (released) and k1 (completed) were written last, k2 after k1.
	if got, want := keys(all), []string{"k2:released", "k1:completed", "k3:in_flight"}; !slices.Equal(got, want) {
		t.Fatalf("recent = %v, want %v", got, want)
	}
	if r := all[1]; r.Response == nil || r.Response.Status != 201 || len(r.Response.Body) != 0 {
		t.Errorf("the completed record listed: %+v, want status 201 without its body", r.Response)
	}
	got, err := s.Recent(ctx, "acme", "payments", idempotency.StateInFlight, 10)
	if err != nil || !slices.Equal(keys(got), []string{"k3:in_flight"}) {
		t.Errorf("in flight: %v %v", keys(got), err)
	}
	got, err = s.Recent(ctx, "acme", "payments", "", 2)
	if err != nil || len(got) != 2 {
		t.Errorf("limit 2: %v %v", keys(got), err)
	}
	got, err = s.Recent(ctx, "nobody", "payments", "", 10)
	if err != nil || len(got) != 0 {
		t.Errorf("an unknown tenant: %v %v", keys(got), err)
	}
}
