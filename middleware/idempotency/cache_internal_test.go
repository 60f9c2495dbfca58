package idempotency

import (
	"fmt"
	"testing"
	"time"
)

func TestReplayCacheExpiresAndEvicts(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	c := NewReplayCache(2, 10*time.Second)
	c.now = func() time.Time { return now }
	rec := func(key string, expires time.Duration) Record {
		return Record{Scope: Scope{Tenant: "t", Route: "r", Key: key}, State: StateCompleted,
			Response: &Response{Status: 201, Body: []byte(key)}, ExpiresAt: now.Add(expires)}
	}
	c.put(rec("a", time.Hour))
	c.put(rec("short", 5*time.Second))
	if _, ok := c.get(Scope{Tenant: "t", Route: "r", Key: "a"}); !ok {
		t.Fatal("a fresh record is not cached")
	}
	now = now.Add(6 * time.Second)
	if _, ok := c.get(Scope{Tenant: "t", Route: "r", Key: "short"}); ok {
		t.Fatal("a record past its retention was served")
	}
	now = now.Add(5 * time.Second)
	if _, ok := c.get(Scope{Tenant: "t", Route: "r", Key: "a"}); ok {
		t.Fatal("a record past the cache TTL was served")
	}
	// Two entries at most: the oldest goes first.
	for i := range 3 {
		c.put(rec(fmt.Sprint("k", i), time.Hour))
	}
	if _, ok := c.get(Scope{Tenant: "t", Route: "r", Key: "k0"}); ok {
		t.Fatal("the oldest entry was not evicted")
	}
	if _, ok := c.get(Scope{Tenant: "t", Route: "r", Key: "k2"}); !ok {
		t.Fatal("the newest entry is missing")
	}
	if len(c.entries) > 2 {
		t.Fatalf("%d entries, want at most 2", len(c.entries))
	}
	// What is never cached.
	for _, r := range []Record{
		{Scope: Scope{Key: "inflight"}, State: StateInFlight, ExpiresAt: now.Add(time.Hour)},
		{Scope: Scope{Key: "unknown"}, State: StateUnknown, ExpiresAt: now.Add(time.Hour)},
		{Scope: Scope{Key: "big"}, State: StateCompleted, Response: &Response{Body: make([]byte, maxCachedBody+1)}, ExpiresAt: now.Add(time.Hour)},
	} {
		c.put(r)
		if _, ok := c.get(r.Scope); ok {
			t.Fatalf("%s was cached", r.Scope.Key)
		}
	}
}

func TestReplayCacheByteBudget(t *testing.T) {
	t.Parallel()
	c := NewReplayCache(100, time.Hour)
	c.maxBytes = 3000
	body := make([]byte, 1000)
	for i := range 5 {
		c.put(Record{Scope: Scope{Key: fmt.Sprint("k", i)}, State: StateCompleted,
			Response: &Response{Status: 200, Body: body}, ExpiresAt: time.Now().Add(time.Hour)})
	}
	if c.bytes > c.maxBytes {
		t.Fatalf("cache holds %d bytes, budget %d", c.bytes, c.maxBytes)
	}
	if _, ok := c.get(Scope{Key: "k4"}); !ok {
		t.Fatal("the newest entry was evicted")
	}
	if _, ok := c.get(Scope{Key: "k0"}); ok {
		t.Fatal("the oldest entry survived a full budget")
	}
	want := 0
	for _, e := range c.entries {
		want += e.size
	}
	if c.bytes != want {
		t.Fatalf("byte count %d, entries hold %d", c.bytes, want)
	}
}
