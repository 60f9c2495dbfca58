package memstore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/middleware/idempotency/memstore"
)

// TestDeleteExpiredTakesWhatIsDue: the janitor deletes the records whose
// retention has passed, no more than its limit a batch, and
// leaves alone a record whose expiry moved later (completed with a longer
// retention, a lease renewed past it) and a key claimed again after it
// expired.
func TestDeleteExpiredTakesWhatIsDue(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 12, 4, 8, 0, 0, 0, time.UTC)
	now := start
	s := memstore.New(memstore.WithClock(func() time.Time { return now }))
	ctx := t.Context()
	scope := func(key string) idempotency.Scope { return idempotency.Scope{Tenant: "t", Route: "r", Key: key} }
	claim := func(key string, lease, retention time.Duration) {
		t.Helper()
		res, err := s.Claim(ctx, idempotency.ClaimRequest{Scope: scope(key), Fingerprint: "fp", Owner: "o-" + key,
			Lease: lease, Retention: retention})
		if err != nil || !res.Claimed {
			t.Fatalf("claim %s: %+v, %v", key, res, err)
		}
	}
	complete := func(key string, retention time.Duration) {
		t.Helper()
		if err := s.Complete(ctx, scope(key), "o-"+key, idempotency.Response{Status: 201}, retention); err != nil {
			t.Fatalf("complete %s: %v", key, err)
		}
	}
	held := func(key string) bool {
		_, err := s.Get(ctx, scope(key))
		return err == nil
	}

	// Ten records done with a minute's retention, one a second apart.
	for i := range 10 {
		key := fmt.Sprintf("short%d", i)
		claim(key, time.Second, time.Minute)
		complete(key, time.Minute)
		now = now.Add(time.Second)
	}
	// Claimed for a minute, then completed with a day's retention.
	claim("longer", time.Second, time.Minute)
	complete("longer", 24*time.Hour)
	// Held in flight, its lease renewed past its first expiry.
	claim("renewed", time.Second, time.Minute)
	// A hundred records kept for a day.
	for i := range 100 {
		key := fmt.Sprintf("day%d", i)
		claim(key, time.Second, 24*time.Hour)
		complete(key, 24*time.Hour)
	}

	now = start.Add(55 * time.Second)
	if err := s.Renew(ctx, scope("renewed"), "o-renewed", 10*time.Minute); err != nil {
		t.Fatalf("renew: %v", err)
	}
	// short0..short4 expired at 60..64 s.
	now = start.Add(64*time.Second + 500*time.Millisecond)
	if n, err := s.DeleteExpired(ctx, 3); err != nil || n != 3 {
		t.Fatalf("DeleteExpired(3) = %d, %v; want 3", n, err)
	}
	if got := s.Len(); got != 109 {
		t.Errorf("Len() = %d after the first batch, want 109", got)
	}
	if n, err := s.DeleteExpired(ctx, 100); err != nil || n != 2 {
		t.Fatalf("DeleteExpired(100) = %d, %v; want the 2 left due", n, err)
	}

	// short5 is claimed again after it expired: the new record stays.
	now = start.Add(2 * time.Minute)
	claim("short5", time.Second, time.Hour)
	if n, err := s.DeleteExpired(ctx, 100); err != nil || n != 4 {
		t.Fatalf("DeleteExpired at 2 min = %d, %v; want short6..short9", n, err)
	}
	for _, key := range []string{"short5", "longer", "renewed", "day0", "day99"} {
		if !held(key) {
			t.Errorf("%s was deleted before its time", key)
		}
	}
	if got := s.Len(); got != 103 {
		t.Errorf("Len() = %d, want 103", got)
	}

	// Past the renewed lease and every retention, all go.
	now = start.Add(48 * time.Hour)
	if n, err := s.DeleteExpired(ctx, 1000); err != nil || n != 103 {
		t.Fatalf("DeleteExpired at 48 h = %d, %v; want 103", n, err)
	}
	if got := s.Len(); got != 0 {
		t.Errorf("Len() = %d after every record expired, want 0", got)
	}
}
