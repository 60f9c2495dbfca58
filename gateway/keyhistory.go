package gateway

import (
	"sync"
	"time"

	"github.com/idemgate/idemgate/middleware/idempotency"
)

// KeyHistoryKeys is how many idempotency keys a KeyHistory remembers. The
// key seen first is forgotten first.
const KeyHistoryKeys = 4096

// KeyHistoryDepth is how many requests a KeyHistory keeps per key. Older
// ones are dropped.
const KeyHistoryDepth = 16

// KeyHistory keeps the last requests each idempotency key received at this
// gateway instance, for the console's key page. It is memory only: another
// instance keeps its own, and a restart forgets it.
type KeyHistory struct {
	mu    sync.Mutex
	keys  map[idempotency.Scope]*keyRequests
	order [KeyHistoryKeys]idempotency.Scope
	next  int
}

// KeyRequest is one request a key received.
type KeyRequest struct {
	At        time.Time
	Kind      RecentKind
	Status    int
	RequestID string
}

type keyRequests struct {
	n  int // requests seen; the last KeyHistoryDepth are in ring
	at [KeyHistoryDepth]KeyRequest
}

// NewKeyHistory returns an empty history.
func NewKeyHistory() *KeyHistory {
	return &KeyHistory{keys: make(map[idempotency.Scope]*keyRequests)}
}

// observe records a request on scope that ended with the middleware's
// outcome and stored state; other outcomes are not recorded.
func (h *KeyHistory) observe(scope idempotency.Scope, outcome, stored string, status int, requestID string, at time.Time) {
	if h == nil || scope.Key == "" {
		return
	}
	kind, ok := recentKindOf(outcome, stored)
	if !ok {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	reqs := h.keys[scope]
	if reqs == nil {
		// The key seen first gives its place, and its memory, to this one:
		// once full, the history allocates nothing.
		if old := h.order[h.next]; old.Key != "" {
			reqs = h.keys[old]
			delete(h.keys, old)
			reqs.n = 0
		} else {
			reqs = &keyRequests{}
		}
		h.order[h.next] = scope
		h.next = (h.next + 1) % KeyHistoryKeys
		h.keys[scope] = reqs
	}
	reqs.at[reqs.n%KeyHistoryDepth] = KeyRequest{At: at, Kind: kind, Status: status, RequestID: requestID}
	reqs.n++
}

// Requests returns the requests scope received here, oldest first, and
// how many older ones were dropped.
func (h *KeyHistory) Requests(scope idempotency.Scope) (reqs []KeyRequest, dropped int) {
	if h == nil {
		return nil, 0
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.keys[scope]
	if r == nil {
		return nil, 0
	}
	first := max(0, r.n-KeyHistoryDepth)
	for i := first; i < r.n; i++ {
		reqs = append(reqs, r.at[i%KeyHistoryDepth])
	}
	return reqs, first
}

// Label says what the gateway answered a request of kind k.
func (k RecentKind) Label() string {
	switch k {
	case RecentNew:
		return "new: the handler ran"
	case RecentReplayed:
		return "replayed the stored answer"
	case RecentConflict:
		return "409: in flight or outcome unknown"
	case RecentMismatch:
		return "422: the key reused with another request"
	case RecentReleased:
		return "released: not processed, a retry runs again"
	}
	return "unknown"
}

// String names kind k: new, replayed, conflict, mismatch or released.
func (k RecentKind) String() string {
	switch k {
	case RecentNew:
		return "new"
	case RecentReplayed:
		return "replayed"
	case RecentConflict:
		return "conflict"
	case RecentMismatch:
		return "mismatch"
	case RecentReleased:
		return "released"
	}
	return "unknown"
}
