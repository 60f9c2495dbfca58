package memstore_test

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/middleware/idempotency/memstore"
)

// TestMaxBytes: past the bound a new key is refused, a key the store
// holds is still answered, a claimed request's answer is stored even past
// the bound, and expired records deleted by the janitor give room back.
func TestMaxBytes(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 4, 8, 0, 0, 0, time.UTC)
	s := memstore.New(memstore.WithMaxBytes(4<<10), memstore.WithClock(func() time.Time { return now }))
	ctx := t.Context()
	body := bytes.Repeat([]byte("x"), 1000)
	claim := func(key string) (idempotency.ClaimResult, error) {
		return s.Claim(ctx, idempotency.ClaimRequest{Scope: idempotency.Scope{Tenant: "t", Route: "r", Key: key},
			Fingerprint: "fp-" + key, Owner: "owner-" + key, Lease: time.Minute, Retention: time.Hour})
	}
	complete := func(key string) {
		t.Helper()
		err := s.Complete(ctx, idempotency.Scope{Tenant: "t", Route: "r", Key: key}, "owner-"+key,
			idempotency.Response{Status: 201, Body: body}, time.Hour)
		if err != nil {
			t.Fatalf("Complete %s: %v", key, err)
		}
	}

	var stored []string
	for i := 0; ; i++ {
		key := fmt.Sprintf("k%d", i)
		res, err := claim(key)
		if errors.Is(err, idempotency.ErrStoreFull) {
			break
		}
		if err != nil || !res.Claimed {
			t.Fatalf("claim %s: %+v, %v", key, res, err)
		}
		complete(key)
		stored = append(stored, key)
		if i > 10 {
			t.Fatalf("%d records of 1000 bytes fit in 4 KiB", len(stored))
		}
	}
	if len(stored) < 2 || s.Refused() != 1 {
		t.Fatalf("stored %d records before the first refusal, refused %d", len(stored), s.Refused())
	}
	if s.Bytes() > 4<<10+1500 || s.Bytes() < int64(len(stored))*1000 {
		t.Errorf("Bytes() = %d for %d records of 1000 bytes", s.Bytes(), len(stored))
	}
	res, err := claim(stored[0])
	if err != nil || res.Claimed || res.Record.Response == nil || res.Record.Response.Status != 201 {
		t.Fatalf("claim of a stored key while full = %+v, %v; want its stored 201", res, err)
	}
	if s.Refused() != 1 {
		t.Errorf("a stored key's claim was counted as refused")
	}

	// Expired records stay counted until the janitor deletes them.
	now = now.Add(2 * time.Hour)
	if _, err := claim("late"); !errors.Is(err, idempotency.ErrStoreFull) {
		t.Fatalf("claim before the janitor ran: %v, want ErrStoreFull", err)
	}
	if n, err := s.DeleteExpired(ctx, 100); err != nil || n != len(stored) {
		t.Fatalf("DeleteExpired = %d, %v; want %d", n, err, len(stored))
	}
	if s.Bytes() != 0 {
		t.Errorf("Bytes() = %d after every record expired and was deleted, want 0", s.Bytes())
	}
	if res, err := claim("late"); err != nil || !res.Claimed {
		t.Fatalf("claim after the janitor freed room: %+v, %v", res, err)
	}
}

// TestMaxBytesCompletionPastTheBound: a request claimed while there was
// room has run; its answer is stored even when it passes the bound, so
// its retries replay it instead of running it again.
func TestMaxBytesCompletionPastTheBound(t *testing.T) {
	t.Parallel()
	s := memstore.New(memstore.WithMaxBytes(2 << 10))
	ctx := t.Context()
	scope := idempotency.Scope{Tenant: "t", Route: "r", Key: "big"}
	if res, err := s.Claim(ctx, idempotency.ClaimRequest{Scope: scope, Fingerprint: "fp", Owner: "o", Lease: time.Minute, Retention: time.Hour}); err != nil || !res.Claimed {
		t.Fatalf("claim: %+v, %v", res, err)
	}
	if err := s.Complete(ctx, scope, "o", idempotency.Response{Status: 201, Body: make([]byte, 8<<10)}, time.Hour); err != nil {
		t.Fatalf("Complete past the bound: %v", err)
	}
	rec, err := s.Get(ctx, scope)
	if err != nil || rec.Response == nil || len(rec.Response.Body) != 8<<10 {
		t.Fatalf("Get = %+v, %v; want the stored 8 KiB answer", rec, err)
	}
	if s.Bytes() <= 8<<10 {
		t.Errorf("Bytes() = %d, want the 8 KiB body counted", s.Bytes())
	}
	if err := s.Delete(ctx, scope); err != nil || s.Bytes() != 0 {
		t.Errorf("after Delete: Bytes() = %d, %v; want 0", s.Bytes(), err)
	}
}

// TestMaxBytesPerTenant: a tenant that fills its share is refused a new
// key while another tenant's new keys are still claimed, and room the
// janitor frees in a tenant's share is that tenant's again.
func TestMaxBytesPerTenant(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 4, 8, 0, 0, 0, time.UTC)
	s := memstore.New(memstore.WithMaxBytes(16<<10), memstore.WithMaxBytesPerTenant(4<<10),
		memstore.WithClock(func() time.Time { return now }))
	ctx := t.Context()
	store := func(tenant, key string) error {
		scope := idempotency.Scope{Tenant: tenant, Route: "r", Key: key}
		res, err := s.Claim(ctx, idempotency.ClaimRequest{Scope: scope, Fingerprint: "fp", Owner: "o", Lease: time.Minute, Retention: time.Hour})
		if err != nil {
			return err
		}
		if !res.Claimed {
			t.Fatalf("claim %s/%s: %+v, want a new claim", tenant, key, res)
		}
		return s.Complete(ctx, scope, "o", idempotency.Response{Status: 201, Body: make([]byte, 1000)}, time.Hour)
	}

	stored := 0
	for ; ; stored++ {
		err := store("a", fmt.Sprintf("k%d", stored))
		if errors.Is(err, idempotency.ErrStoreFull) {
			break
		}
		if err != nil || stored > 10 {
			t.Fatalf("tenant a's record %d: %v (4 KiB share)", stored, err)
		}
	}
	if stored < 2 || s.Bytes() > 4<<10+1500 {
		t.Fatalf("tenant a stored %d records, %d bytes, before its first refusal; want its 4 KiB share full", stored, s.Bytes())
	}
	for i := range stored {
		if err := store("b", fmt.Sprintf("k%d", i)); err != nil {
			t.Fatalf("tenant b's new key %d while tenant a's share is full: %v", i, err)
		}
	}
	if s.Refused() != 1 {
		t.Errorf("Refused() = %d, want tenant a's one refusal", s.Refused())
	}

	now = now.Add(2 * time.Hour)
	if n, err := s.DeleteExpired(ctx, 100); err != nil || n != 2*stored {
		t.Fatalf("DeleteExpired = %d, %v; want %d", n, err, 2*stored)
	}
	if err := store("a", "late"); err != nil {
		t.Errorf("tenant a's new key once the janitor freed its share: %v", err)
	}
}
