package memstore

import (
	"context"
	"slices"
	"strings"

	"github.com/idemgate/idemgate/middleware/idempotency"
)

// Keys returns at most limit live records of tenant and route whose key
// sorts after after ("" starts at the first), in key order, in state when
// state is not "", and the key that starts the next page ("" when this
// page is the last), as pgstore's Keys does. It walks every record under
// the store's mutex: an operator's look, not a request's.
func (s *Store) Keys(_ context.Context, tenant, route string, state idempotency.State, after string, limit int) ([]idempotency.Record, string, error) {
	if limit <= 0 {
		return nil, "", nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	var found []*record
	for scope, r := range s.records {
		if scope.Tenant != tenant || scope.Route != route || scope.Key <= after || expired(r, now) || state != "" && r.State != state {
			continue
		}
		found = append(found, r)
	}
	slices.SortFunc(found, func(a, b *record) int { return strings.Compare(a.Scope.Key, b.Scope.Key) })
	next := ""
	if len(found) > limit {
		found = found[:limit]
		next = found[limit-1].Scope.Key
	}
	out := make([]idempotency.Record, 0, len(found))
	for _, r := range found {
		rec := copyRecord(r)
		if rec.Response != nil {
			rec.Response.Body = nil // the list shows the stored status only
		}
		out = append(out, rec)
	}
	return out, next, nil
}
