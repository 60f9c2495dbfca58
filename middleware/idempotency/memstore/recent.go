package memstore

import (
	"context"
	"slices"

	"github.com/idemgate/idemgate/middleware/idempotency"
)

// Recent returns at most limit live records of tenant and route, the most
// recently written first, in state when state is not "" (the operator
// console's list of keys). It walks every record under the store's mutex:
// an operator's look, not a request's.
func (s *Store) Recent(_ context.Context, tenant, route string, state idempotency.State, limit int) ([]idempotency.Record, error) {
	if limit <= 0 {
		return nil, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	var found []*record
	for scope, r := range s.records {
		if scope.Tenant != tenant || scope.Route != route || expired(r, now) || state != "" && r.State != state {
			continue
		}
		found = append(found, r)
	}
	slices.SortFunc(found, func(a, b *record) int {
		if c := b.UpdatedAt.Compare(a.UpdatedAt); c != 0 {
			return c
		}
		if a.Scope.Key < b.Scope.Key {
			return -1
		}
		return 1
	})
	out := make([]idempotency.Record, 0, min(limit, len(found)))
	for _, r := range found[:min(limit, len(found))] {
		rec := copyRecord(r)
		if rec.Response != nil {
			rec.Response.Body = nil // the list shows the stored status only
		}
		out = append(out, rec)
	}
	return out, nil
}
