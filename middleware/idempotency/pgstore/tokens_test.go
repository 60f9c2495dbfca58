package pgstore

import (
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/middleware/idempotency"
)

// TestTokensAfterLostTail deletes a key's record and its claim ledger as a
// failover to a standby that never received them would lose them (an
// async standby promoted behind its primary). The key's next claim must
// carry a higher fencing token than every claim before the loss, or an
// upstream that fences on it could not refuse the re-run: counting alone
// would start the key again at the first token.
func TestTokensAfterLostTail(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t)
	s := newStore(t, pool)
	ctx := t.Context()
	scope := idempotency.Scope{Tenant: "acme", Route: "payments", Key: "lost"}

	var last int64
	for i, owner := range []string{"o1", "o2", "o3"} {
		res := claim(t, s, scope, "fp", owner)
		if !res.Claimed || res.Record.FencingToken <= last {
			t.Fatalf("claim %d: %+v, want a claim with a token above %d", i, res, last)
		}
		if i > 0 && !res.TakeOver {
			t.Fatalf("claim %d of a released record: TakeOver false", i)
		}
		last = res.Record.FencingToken
		if i < 2 {
			if err := s.Release(ctx, scope, owner); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.Complete(ctx, scope, "o3", idempotency.Response{Status: 201}, time.Hour); err != nil {
		t.Fatal(err)
	}

	// The failover: the promoted standby never had the record or its
	// ledger rows.
	if _, err := pool.Exec(ctx, `DELETE FROM idempotency_claims WHERE tenant = $1 AND route = $2 AND key = $3`, scope.Tenant, scope.Route, scope.Key); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `DELETE FROM idempotency_records WHERE tenant = $1 AND route = $2 AND key = $3`, scope.Tenant, scope.Route, scope.Key); err != nil {
		t.Fatal(err)
	}

	res := claim(t, s, scope, "fp", "o4")
	if !res.Claimed || res.TakeOver {
		t.Fatalf("claim after the loss: %+v, want a new record", res)
	}
	if res.Record.FencingToken <= last {
		t.Fatalf("claim after the loss got fencing token %d, not above %d issued before it: the upstream cannot refuse the re-run", res.Record.FencingToken, last)
	}
	claims, err := s.Claims(ctx, scope)
	if err != nil {
		t.Fatal(err)
	}
	if len(claims) != 1 || claims[0].FencingToken != res.Record.FencingToken {
		t.Fatalf("claim ledger after the loss: %+v, want the new claim with token %d", claims, res.Record.FencingToken)
	}
}
