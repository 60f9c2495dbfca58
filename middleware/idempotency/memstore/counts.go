package memstore

import (
	"context"

	"github.com/idemgate/idemgate/middleware/idempotency"
)

// AddRequests implements idempotency.RequestCounter. The counts live in the
// record's own entry, so they go when it expires or is deleted.
func (s *Store) AddRequests(_ context.Context, counts []idempotency.KeyCount) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	for _, c := range counts {
		r := s.live(c.Scope, now)
		if r == nil {
			continue
		}
		if r.requests == nil {
			r.requests = &idempotency.KeyCount{}
		}
		r.requests.Add(c)
	}
	return nil
}

// RequestCounts implements idempotency.RequestCounter.
func (s *Store) RequestCounts(_ context.Context, scope idempotency.Scope) (idempotency.KeyCount, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.live(scope, s.now())
	if r == nil {
		return idempotency.KeyCount{}, idempotency.ErrNotFound
	}
	out := idempotency.KeyCount{Scope: scope}
	if r.requests != nil {
		out.Add(*r.requests)
	}
	return out, nil
}
