package gateway

import (
	"slices"
	"sync"
	"time"

	"github.com/idemgate/idemgate/middleware/idempotency"
)

// RecentWindow is how far back RecentRequests counts, by whole minutes.
const RecentWindow = 15 * time.Minute

// maxRecentPairs bounds the (tenant, route) pairs RecentRequests keeps
// apart; requests of pairs beyond it are counted under tenant
// RecentOverflow, so that a stream of made-up tenant names (auth mode
// header) cannot grow the map without end.
const maxRecentPairs = 1024

// RecentOverflow is the tenant the requests of pairs past the bound are
// counted under.
const RecentOverflow = "(other)"

// RecentKind is one column of the console's overview.
type RecentKind int

// The kinds RecentRequests counts, from the idempotency middleware's
// decision on each request (idempotency.Outcome, idempotency.Stored).
const (
	RecentNew      RecentKind = iota // claimed, the handler ran
	RecentReplayed                   // the stored answer was replayed
	RecentConflict                   // 409: in flight or outcome unknown
	RecentMismatch                   // 422: same key, another request
	RecentReleased                   // not processed: a retry runs again
	recentKinds
)

// RecentRequests counts the requests of each tenant and route by kind over
// the last RecentWindow, in one-minute buckets, for the operator console.
// The Prometheus series have no tenant label (its values are unbounded), so
// the console reads this in-process count instead: each gateway instance
// counts its own requests. It sits on the request path, so Add allocates
// nothing once a pair has been seen: the map is looked up with the
// request's own strings, and the buckets are a fixed array.
type RecentRequests struct {
	now   func() time.Time
	mu    sync.RWMutex
	pairs map[recentPair]*recentCounts
}

type recentPair struct{ tenant, route string }

type recentCounts struct {
	mu sync.Mutex
	// buckets[m%len] counts minute m (Unix minutes) when minute[m%len] == m.
	minute  [recentBuckets]int64
	buckets [recentBuckets][recentKinds]uint32
}

const recentBuckets = int(RecentWindow / time.Minute)

// NewRecentRequests returns an empty count on now (time.Now when nil).
func NewRecentRequests(now func() time.Time) *RecentRequests {
	if now == nil {
		now = time.Now
	}
	return &RecentRequests{now: now, pairs: map[recentPair]*recentCounts{}}
}

// observe counts a request that ended with the middleware's outcome and
// stored state (as the access log has them); other outcomes are not counted.
func (c *RecentRequests) observe(tenant, route, outcome, stored string) {
	if kind, ok := recentKindOf(outcome, stored); ok {
		c.Add(tenant, route, kind)
	}
}

// recentKindOf is the kind of a request that ended with the middleware's
// outcome and stored state; false for a request of no kind counted.
func recentKindOf(outcome, stored string) (RecentKind, bool) {
	var kind RecentKind
	switch {
	case stored == string(idempotency.StoredReleased):
		kind = RecentReleased
	case outcome == string(idempotency.OutcomeNew):
		kind = RecentNew
	case outcome == string(idempotency.OutcomeReplay):
		kind = RecentReplayed
	case outcome == string(idempotency.OutcomeConflict):
		kind = RecentConflict
	case outcome == string(idempotency.OutcomeMismatch):
		kind = RecentMismatch
	default:
		return 0, false
	}
	return kind, true
}

// Add counts one request of kind for tenant and route, now.
func (c *RecentRequests) Add(tenant, route string, kind RecentKind) {
	if c == nil || kind < 0 || kind >= recentKinds {
		return
	}
	p := recentPair{tenant, route}
	c.mu.RLock()
	counts := c.pairs[p]
	c.mu.RUnlock()
	if counts == nil {
		counts = c.insert(p)
	}
	m := c.now().Unix() / 60
	i := int(m % int64(recentBuckets))
	counts.mu.Lock()
	if counts.minute[i] != m {
		counts.minute[i] = m
		counts.buckets[i] = [recentKinds]uint32{}
	}
	counts.buckets[i][kind]++
	counts.mu.Unlock()
}

func (c *RecentRequests) insert(p recentPair) *recentCounts {
	c.mu.Lock()
	defer c.mu.Unlock()
	if counts := c.pairs[p]; counts != nil {
		return counts
	}
	if len(c.pairs) >= maxRecentPairs {
		p.tenant = RecentOverflow
		if counts := c.pairs[p]; counts != nil {
			return counts
		}
	}
	counts := &recentCounts{}
	c.pairs[p] = counts
	return counts
}

// RecentRow is one tenant and route's counts over the window.
type RecentRow struct {
	Tenant, Route string
	// Counts are indexed by RecentKind.
	Counts [recentKinds]uint64
}

// New, Replayed, Conflict, Mismatch and Released read Counts by kind.
func (r RecentRow) New() uint64      { return r.Counts[RecentNew] }
func (r RecentRow) Replayed() uint64 { return r.Counts[RecentReplayed] }
func (r RecentRow) Conflict() uint64 { return r.Counts[RecentConflict] }
func (r RecentRow) Mismatch() uint64 { return r.Counts[RecentMismatch] }
func (r RecentRow) Released() uint64 { return r.Counts[RecentReleased] }

// Rows returns the pairs with a request in the window, by tenant then
// route.
func (c *RecentRequests) Rows() []RecentRow {
	if c == nil {
		return nil
	}
	now := c.now().Unix() / 60
	c.mu.RLock()
	pairs := make(map[recentPair]*recentCounts, len(c.pairs))
	for p, counts := range c.pairs {
		pairs[p] = counts
	}
	c.mu.RUnlock()
	var rows []RecentRow
	for p, counts := range pairs {
		row := RecentRow{Tenant: p.tenant, Route: p.route}
		seen := false
		counts.mu.Lock()
		for i := range counts.minute {
			if m := counts.minute[i]; m > now-int64(recentBuckets) && m <= now {
				for k, n := range counts.buckets[i] {
					row.Counts[k] += uint64(n)
					seen = seen || n > 0
				}
			}
		}
		counts.mu.Unlock()
		if seen {
			rows = append(rows, row)
		}
	}
	slices.SortFunc(rows, func(a, b RecentRow) int {
		if a.Tenant != b.Tenant {
			if a.Tenant < b.Tenant {
				return -1
			}
			return 1
		}
		if a.Route < b.Route {
			return -1
		}
		if a.Route > b.Route {
			return 1
		}
		return 0
	})
	return rows
}
