package main

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/middleware/idempotency/pgstore"
	"github.com/idemgate/idemgate/middleware/idempotency/redisstore"
)

func testFill(records, expired int64) fillSpec {
	return fillSpec{
		Tenant: "bench", Route: "payments", KeyPrefix: "t-", Records: records, Expired: expired,
		Retention: 24 * time.Hour, Now: time.Now(),
		Fingerprint: "f00d", Status: http.StatusCreated,
		Header: http.Header{"Content-Type": {"application/json"}, "Location": {"/v1/payments/pay_1"}},
		Body:   []byte(`{"id":"pay_1","status":"succeeded"}`),
	}
}

// checkFilled asserts that the store reads every live filled record as the
// completed record the gateway would replay, and none of the expired ones.
func checkFilled(t *testing.T, store idempotency.Store, f fillSpec) {
	t.Helper()
	for i := range f.Records {
		scope := idempotency.Scope{Tenant: f.Tenant, Route: f.Route, Key: f.key(i)}
		rec, err := store.Get(t.Context(), scope)
		if i < f.Expired {
			if !errors.Is(err, idempotency.ErrNotFound) {
				t.Errorf("record %d is expired, Get = %+v, %v; want ErrNotFound", i, rec, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("record %d: Get: %v", i, err)
		}
		if rec.State != idempotency.StateCompleted || rec.Fingerprint != f.Fingerprint || rec.Response == nil {
			t.Fatalf("record %d: %+v, want a completed record with fingerprint %s", i, rec, f.Fingerprint)
		}
		if rec.Response.Status != f.Status || string(rec.Response.Body) != string(f.Body) ||
			rec.Response.Header.Get("Location") != f.Header.Get("Location") {
			t.Errorf("record %d: response %+v, want status %d, body %s, Location %s", i, rec.Response, f.Status, f.Body, f.Header.Get("Location"))
		}
		if want := f.expiresAt(i); rec.ExpiresAt.Sub(want).Abs() > time.Millisecond {
			t.Errorf("record %d expires at %v, want %v", i, rec.ExpiresAt, want)
		}
	}
}

func TestFillPostgresIsReadAsCompletedRecords(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t)
	f := testFill(10, 3)
	if err := fillPostgres(t.Context(), pool, f, 4, nil); err != nil {
		t.Fatal(err)
	}
	store := pgstore.New(pool)
	t.Cleanup(store.Close)
	checkFilled(t, store, f)

	// The janitor finds exactly the expired records, and their claims go
	// with them.
	n, err := store.DeleteExpired(t.Context(), 100)
	if err != nil || n != int(f.Expired) {
		t.Fatalf("DeleteExpired = %d, %v; want %d", n, err, f.Expired)
	}
	var claims int64
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM idempotency_claims WHERE outcome = 'completed'`).Scan(&claims); err != nil {
		t.Fatal(err)
	}
	if claims != f.Records-f.Expired {
		t.Errorf("%d ledger rows left, want %d", claims, f.Records-f.Expired)
	}
}

func TestFillRedisIsReadAsCompletedRecords(t *testing.T) {
	t.Parallel()
	rdb := testkit.Redis(t)
	prefix := testkit.Prefix()
	f := testFill(10, 0)
	t.Cleanup(func() { _ = unfillRedis(context.Background(), rdb, prefix, f) })
	if err := fillRedis(t.Context(), rdb, prefix, f, nil); err != nil {
		t.Fatal(err)
	}
	store := redisstore.New(rdb, redisstore.WithPrefix(prefix))
	t.Cleanup(func() { _ = store.Close() })
	checkFilled(t, store, f)

	// Redis expires each key itself, at the record's expiry.
	k := f.redisKey(prefix, f.key(0))
	if ttl := rdb.PExpireTime(t.Context(), k).Val(); ttl.Milliseconds() != f.expiresAt(0).UnixMilli() {
		t.Errorf("PEXPIRETIME = %d, want %d", ttl.Milliseconds(), f.expiresAt(0).UnixMilli())
	}
	if err := unfillRedis(t.Context(), rdb, prefix, f); err != nil {
		t.Fatal(err)
	}
	if n := rdb.Exists(t.Context(), k).Val(); n != 0 {
		t.Errorf("a filled key is left after unfillRedis")
	}
}

func TestFillKeysAreStableAndSpread(t *testing.T) {
	t.Parallel()
	f := testFill(1000, 250)
	if f.key(7) != testFill(1000, 250).key(7) || f.key(7) == f.key(8) {
		t.Fatal("keys must be a function of the prefix and the index, and differ")
	}
	if len(f.key(0)) != 36 {
		t.Errorf("key %q is not UUID-shaped", f.key(0))
	}
	if !f.expiresAt(f.Expired-1).Before(f.Now) || f.expiresAt(f.Expired).Before(f.Now.Add(liveDelay)) {
		t.Error("the first Expired records must be past their expiry, the others live for at least liveDelay")
	}
	seen := map[string]bool{}
	for n := range uint64(500) {
		k := f.liveKey(n)
		seen[k] = true
		for i := range f.Expired {
			if k == f.key(i) {
				t.Fatalf("replay %d targets expired record %d", n, i)
			}
		}
	}
	if len(seen) < 400 {
		t.Errorf("500 replays hit only %d distinct records", len(seen))
	}
}
