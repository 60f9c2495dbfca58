package redisstore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/middleware/idempotency"
)

// eachRedis runs fn against a single Redis and, when TEST_REDIS_CLUSTER_URL
// is set, against a Redis Cluster.
func eachRedis(t *testing.T, fn func(t *testing.T, rdb redis.UniversalClient)) {
	t.Run("standalone", func(t *testing.T) {
		t.Parallel()
		fn(t, testkit.Redis(t))
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		fn(t, testkit.RedisCluster(t))
	})
}

// maxSafeInteger is 2^53: tokens stay below it so that JavaScript, and
// any JSON reader that parses numbers as doubles, reads them exactly.
const maxSafeInteger = 1 << 53

func claimToken(t *testing.T, s idempotency.Store, sc idempotency.Scope, owner string) idempotency.ClaimResult {
	t.Helper()
	res, err := s.Claim(t.Context(), idempotency.ClaimRequest{Scope: sc, Fingerprint: "fp", Owner: owner, Lease: time.Minute, Retention: time.Hour})
	if err != nil {
		t.Fatalf("Claim(%s): %v", sc.Key, err)
	}
	if !res.Claimed {
		t.Fatalf("Claim(%s): not claimed: %+v", sc.Key, res.Record)
	}
	if tok := res.Record.FencingToken; tok < 1 || tok >= maxSafeInteger {
		t.Fatalf("Claim(%s): fencing token %d, want 1 ≤ token < 2^53", sc.Key, tok)
	}
	return res
}

// TestFencingTokensSurviveDataLoss: Redis loses every record (a restart
// without persistence, a failover to an empty replica). The next claim of
// each key, new or a take-over, must still carry a fencing token higher
// than any the keys carried before, or an upstream that refuses stale
// tokens would refuse the re-run, or take it for the original.
func TestFencingTokensSurviveDataLoss(t *testing.T) {
	eachRedis(t, func(t *testing.T, rdb redis.UniversalClient) {
		s, prefix := newStore(t, rdb)
		ctx := t.Context()
		const keys = 16 // spread over the cluster's nodes
		var highest int64
		for i := range keys {
			sc := scope(fmt.Sprint("lost-", i))
			first := claimToken(t, s, sc, "before-a")
			if err := s.Release(ctx, sc, "before-a"); err != nil {
				t.Fatal(err)
			}
			again := claimToken(t, s, sc, "before-b")
			if again.Record.FencingToken <= first.Record.FencingToken {
				t.Fatalf("%s: take-over token %d not above the first claim's %d", sc.Key, again.Record.FencingToken, first.Record.FencingToken)
			}
			if err := s.Complete(ctx, sc, "before-b", idempotency.Response{Status: 201}, time.Hour); err != nil {
				t.Fatal(err)
			}
			highest = max(highest, again.Record.FencingToken)
		}

		// The data loss: every record of this store is gone.
		deleteKeys(t, rdb, prefix)
		if left := scanKeys(t, rdb, prefix); len(left) != 0 {
			t.Fatalf("keys left after the loss: %q", left)
		}

		for i := range keys {
			sc := scope(fmt.Sprint("lost-", i))
			res := claimToken(t, s, sc, "after-a")
			if res.TakeOver {
				t.Fatalf("%s: the first claim after the loss is a take-over", sc.Key)
			}
			if res.Record.FencingToken <= highest {
				t.Fatalf("%s: token %d after the loss, not above %d, the highest before it", sc.Key, res.Record.FencingToken, highest)
			}
			// A take-over after the loss keeps counting up.
			if err := s.Release(ctx, sc, "after-a"); err != nil {
				t.Fatal(err)
			}
			next := claimToken(t, s, sc, "after-b")
			if !next.TakeOver || next.Record.FencingToken <= res.Record.FencingToken {
				t.Fatalf("%s: take-over after the loss: %+v, want a token above %d", sc.Key, next, res.Record.FencingToken)
			}
		}
	})
}

// TestFencingTokenNeverGoesBack: a record whose token is ahead of the
// server clock (written while the clock was ahead, then stepped back) still
// gets the next token, not the clock's.
func TestFencingTokenNeverGoesBack(t *testing.T) {
	eachRedis(t, func(t *testing.T, rdb redis.UniversalClient) {
		s, prefix := newStore(t, rdb)
		ctx := t.Context()
		sc := scope("ahead")
		first := claimToken(t, s, sc, "owner-1")
		if err := s.Release(ctx, sc, "owner-1"); err != nil {
			t.Fatal(err)
		}
		// A day ahead of the clock that issued the first token.
		ahead := first.Record.FencingToken + int64(24*time.Hour/time.Microsecond)
		if err := rdb.HSet(ctx, onlyKey(t, rdb, prefix), "token", ahead).Err(); err != nil {
			t.Fatal(err)
		}
		if got := claimToken(t, s, sc, "owner-2").Record.FencingToken; got != ahead+1 {
			t.Fatalf("take-over of a record whose token %d is ahead of the clock: token %d, want %d", ahead, got, ahead+1)
		}
		if rec, err := s.Get(ctx, sc); err != nil || rec.FencingToken != ahead+1 {
			t.Fatalf("stored record: %+v %v, want token %d", rec, err, ahead+1)
		}
	})
}
