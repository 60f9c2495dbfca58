package idempotencytest_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/middleware/idempotency/idempotencytest"
	"github.com/idemgate/idemgate/middleware/idempotency/memstore"
)

// twoOwners lets a claim of an in-flight record succeed: two owners run
// the same request at once.
type twoOwners struct{ idempotency.Store }

func (s twoOwners) Claim(ctx context.Context, req idempotency.ClaimRequest) (idempotency.ClaimResult, error) {
	res, err := s.Store.Claim(ctx, req)
	if err == nil && !res.Claimed && res.Record.State == idempotency.StateInFlight && res.Record.Fingerprint == req.Fingerprint {
		res.Claimed = true
	}
	return res, err
}

// sameToken hands a take-over the token of the claim it took over: a
// stale owner's write cannot be told from the new one's.
type sameToken struct{ idempotency.Store }

func (s sameToken) Claim(ctx context.Context, req idempotency.ClaimRequest) (idempotency.ClaimResult, error) {
	res, err := s.Store.Claim(ctx, req)
	if err == nil && res.Claimed && res.TakeOver {
		res.Record.FencingToken--
	}
	return res, err
}

// lostWrite answers a non-owner's Complete with success, without storing
// the response.
type lostWrite struct{ idempotency.Store }

func (s lostWrite) Complete(ctx context.Context, scope idempotency.Scope, owner string, resp idempotency.Response, retention time.Duration) error {
	if err := s.Store.Complete(ctx, scope, owner, resp, retention); !errors.Is(err, idempotency.ErrNotOwner) {
		return err
	}
	return nil
}

// TestCheckHistoryCatchesBrokenStores: each store breaks one promise of
// the Store interface; the store model refuses its history and shows the
// few calls that prove it.
func TestCheckHistoryCatchesBrokenStores(t *testing.T) {
	for _, tc := range []struct {
		name  string
		store idempotency.Store
		shows string // what the shortest history must show
	}{
		{"two owners", twoOwners{memstore.New()}, "claimed=true"},
		{"same token on a take-over", sameToken{memstore.New()}, "take-over=true"},
		{"a non-owner's complete succeeds", lostWrite{memstore.New()}, "complete"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res, err := idempotencytest.CheckHistory(t.Context(), tc.store)
			if err != nil {
				t.Fatal(err)
			}
			if res.Ok() {
				t.Fatalf("the broken store passed:\n%s", res)
			}
			v := res.Violations[0]
			if len(v.History) == 0 || len(v.History) > 6 || len(v.History) >= v.Operations {
				t.Errorf("shortest history: %d of %d operations, want a few:\n%s", len(v.History), v.Operations, v.Text)
			}
			if !strings.Contains(v.Text, tc.shows) {
				t.Errorf("the history does not show %q:\n%s", tc.shows, v.Text)
			}
			t.Logf("caught:\n%s", res)
		})
	}
}

// TestCheckHistoryPassesMemstore: the same run on a correct store finds
// nothing.
func TestCheckHistoryPassesMemstore(t *testing.T) {
	res, err := idempotencytest.CheckHistory(t.Context(), memstore.New())
	if err != nil {
		t.Fatal(err)
	}
	if !res.Ok() {
		t.Fatalf("memstore's history was refused:\n%s", res)
	}
}
