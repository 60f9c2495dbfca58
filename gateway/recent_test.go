package gateway

import (
	"fmt"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/testkit"
)

// The console's recent counts: by tenant, route and kind, over the last
// RecentWindow only.
func TestRecentRequestsCountsTheWindow(t *testing.T) {
	t.Parallel()
	clock := testkit.NewClock(time.Date(2026, 1, 1, 10, 0, 30, 0, time.UTC))
	c := NewRecentRequests(clock.Now)
	c.observe("acme", "payments", "new", "")
	c.observe("acme", "payments", "new", "released") // ran, then released
	c.observe("acme", "payments", "replay", "")
	c.observe("acme", "payments", "conflict", "")
	c.observe("acme", "payments", "mismatch", "")
	c.observe("acme", "payments", "passthrough", "") // not an idempotency decision
	c.observe("globex", "payments", "new", "")
	want := []RecentRow{
		{Tenant: "acme", Route: "payments", Counts: [recentKinds]uint64{1, 1, 1, 1, 1}},
		{Tenant: "globex", Route: "payments", Counts: [recentKinds]uint64{1, 0, 0, 0, 0}},
	}
	if got := c.Rows(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("rows = %v, want %v", got, want)
	}
	clock.Add(RecentWindow - time.Minute)
	c.observe("acme", "payments", "new", "")
	if got := c.Rows(); len(got) != 2 || got[0].New() != 2 {
		t.Fatalf("within the window: %v, want acme's 2 new", got)
	}
	clock.Add(time.Minute)
	if got := c.Rows(); len(got) != 1 || got[0].Tenant != "acme" || got[0].New() != 1 || got[0].Replayed() != 0 {
		t.Fatalf("past the window: %v, want only acme's last request", got)
	}
}

// Made-up tenant names cannot grow the count without end.
func TestRecentRequestsBoundsThePairs(t *testing.T) {
	t.Parallel()
	c := NewRecentRequests(nil)
	for i := range maxRecentPairs + 100 {
		c.Add(fmt.Sprintf("t%d", i), "r", RecentNew)
	}
	rows := c.Rows()
	if len(rows) != maxRecentPairs+1 {
		t.Fatalf("%d rows, want %d and the overflow", len(rows), maxRecentPairs)
	}
	for _, r := range rows {
		if r.Tenant == RecentOverflow && r.New() != 100 {
			t.Errorf("overflow counts %d, want 100", r.New())
		}
	}
}

// Counting a request of a pair already seen allocates nothing: it runs on
// every request.
func TestRecentRequestsAddAllocatesNothing(t *testing.T) {
	c := NewRecentRequests(nil)
	tenant, route := "acme", "payments"
	c.observe(tenant, route, "new", "")
	if n := testing.AllocsPerRun(1000, func() { c.observe(tenant, route, "replay", "") }); n != 0 {
		t.Errorf("observe allocates %v times per request, want 0", n)
	}
}

func BenchmarkRecentRequestsAdd(b *testing.B) {
	c := NewRecentRequests(nil)
	b.ReportAllocs()
	for b.Loop() {
		c.Add("acme", "payments", RecentNew)
	}
}
