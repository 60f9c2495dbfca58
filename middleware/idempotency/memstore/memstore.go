// Package memstore is an in-process idempotency.Store for tests and for
// library users with a single process. Records live in a map guarded by a
// mutex; nothing survives a restart, and two processes never see each
// other's records, so it is no protection across gateway instances.
//
//	store := memstore.New()
//	mw := idempotency.New(idempotency.Config{Route: "payments"}, store)
package memstore

import (
	"bytes"
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/idemgate/idemgate/middleware/idempotency"
)

var (
	_ idempotency.Store   = (*Store)(nil)
	_ idempotency.Watcher = (*Store)(nil)
	_ idempotency.Janitor = (*Store)(nil)
)

// Store keeps records in memory. The zero value is not usable; call New.
type Store struct {
	now func() time.Time

	mu       sync.Mutex
	records  map[idempotency.Scope]*idempotency.Record
	watchers map[idempotency.Scope]map[chan struct{}]struct{}
}

// Option configures a Store.
type Option func(*Store)

// WithClock replaces time.Now, for tests that move time by hand.
func WithClock(now func() time.Time) Option { return func(s *Store) { s.now = now } }

// New returns an empty store.
func New(opts ...Option) *Store {
	s := &Store{
		now:      time.Now,
		records:  make(map[idempotency.Scope]*idempotency.Record),
		watchers: make(map[idempotency.Scope]map[chan struct{}]struct{}),
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

// live returns the unexpired record for scope, or nil. Callers hold mu.
func (s *Store) live(scope idempotency.Scope, now time.Time) *idempotency.Record {
	r := s.records[scope]
	if r == nil || expired(r, now) {
		return nil
	}
	return r
}

// expired: retention passed and no live lease holds the record.
func expired(r *idempotency.Record, now time.Time) bool {
	if r.State == idempotency.StateInFlight && r.LeaseUntil.After(now) {
		return false
	}
	return !r.ExpiresAt.After(now)
}

// Claim implements idempotency.Store.
func (s *Store) Claim(_ context.Context, req idempotency.ClaimRequest) (idempotency.ClaimResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	old := s.records[req.Scope]
	r := s.live(req.Scope, now)
	switch {
	case r == nil:
		var token int64 = 1
		if old != nil {
			token = old.FencingToken + 1
		}
		r = &idempotency.Record{Scope: req.Scope, CreatedAt: now, FencingToken: token}
		s.records[req.Scope] = r
		s.take(r, req, now)
		return idempotency.ClaimResult{Claimed: true, Record: copyRecord(r)}, nil
	case r.Fingerprint == req.Fingerprint &&
		(r.State == idempotency.StateReleased || (r.State == idempotency.StateInFlight && !r.LeaseUntil.After(now))):
		r.FencingToken++
		s.take(r, req, now)
		return idempotency.ClaimResult{Claimed: true, TakeOver: true, Record: copyRecord(r)}, nil
	default:
		return idempotency.ClaimResult{Record: copyRecord(r)}, nil
	}
}

func (s *Store) take(r *idempotency.Record, req idempotency.ClaimRequest, now time.Time) {
	r.Fingerprint = req.Fingerprint
	r.State = idempotency.StateInFlight
	r.Owner = req.Owner
	r.LeaseUntil = now.Add(req.Lease)
	r.Response = nil
	r.UpdatedAt = now
	r.ExpiresAt = now.Add(max(req.Retention, req.Lease))
}

// owned returns the in-flight record held by owner. Callers hold mu.
func (s *Store) owned(scope idempotency.Scope, owner string) (*idempotency.Record, time.Time, error) {
	now := s.now()
	r := s.live(scope, now)
	if r == nil || r.State != idempotency.StateInFlight || r.Owner != owner {
		return nil, now, idempotency.ErrNotOwner
	}
	return r, now, nil
}

// Renew implements idempotency.Store.
func (s *Store) Renew(_ context.Context, scope idempotency.Scope, owner string, lease time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, now, err := s.owned(scope, owner)
	if err != nil {
		return err
	}
	r.LeaseUntil = now.Add(lease)
	if r.ExpiresAt.Before(r.LeaseUntil) {
		r.ExpiresAt = r.LeaseUntil
	}
	return nil
}

// Complete implements idempotency.Store.
func (s *Store) Complete(_ context.Context, scope idempotency.Scope, owner string, resp idempotency.Response, retention time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, now, err := s.owned(scope, owner)
	if err != nil {
		return err
	}
	stored := copyResponse(resp)
	r.Response = &stored
	s.end(r, idempotency.StateCompleted, now)
	r.ExpiresAt = now.Add(retention)
	return nil
}

// Release implements idempotency.Store.
func (s *Store) Release(_ context.Context, scope idempotency.Scope, owner string) error {
	return s.endOwned(scope, owner, idempotency.StateReleased)
}

// MarkUnknown implements idempotency.Store.
func (s *Store) MarkUnknown(_ context.Context, scope idempotency.Scope, owner string) error {
	return s.endOwned(scope, owner, idempotency.StateUnknown)
}

func (s *Store) endOwned(scope idempotency.Scope, owner string, state idempotency.State) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, now, err := s.owned(scope, owner)
	if err != nil {
		return err
	}
	s.end(r, state, now)
	return nil
}

// end moves a record out of flight and wakes its watchers. Callers hold mu.
func (s *Store) end(r *idempotency.Record, state idempotency.State, now time.Time) {
	r.State = state
	r.Owner = ""
	r.LeaseUntil = time.Time{}
	r.UpdatedAt = now
	for ch := range s.watchers[r.Scope] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// Get implements idempotency.Store.
func (s *Store) Get(_ context.Context, scope idempotency.Scope) (idempotency.Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.live(scope, s.now())
	if r == nil {
		return idempotency.Record{}, idempotency.ErrNotFound
	}
	return copyRecord(r), nil
}

// Delete implements idempotency.Store.
func (s *Store) Delete(_ context.Context, scope idempotency.Scope) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.records, scope)
	return nil
}

// Resolve implements idempotency.Store.
func (s *Store) Resolve(_ context.Context, scope idempotency.Scope) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	r := s.live(scope, now)
	switch {
	case r == nil:
		return idempotency.ErrNotFound
	case r.State != idempotency.StateUnknown:
		return idempotency.ErrNotUnknown
	}
	s.end(r, idempotency.StateReleased, now)
	return nil
}

// Watch implements idempotency.Watcher.
func (s *Store) Watch(ctx context.Context, scope idempotency.Scope) (<-chan struct{}, func(), error) {
	ch := make(chan struct{}, 1)
	s.mu.Lock()
	if s.watchers[scope] == nil {
		s.watchers[scope] = make(map[chan struct{}]struct{})
	}
	s.watchers[scope][ch] = struct{}{}
	s.mu.Unlock()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			delete(s.watchers[scope], ch)
			if len(s.watchers[scope]) == 0 {
				delete(s.watchers, scope)
			}
		})
	}
	return ch, stop, nil
}

// DeleteExpired implements idempotency.Janitor.
func (s *Store) DeleteExpired(_ context.Context, limit int) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	n := 0
	for scope, r := range s.records {
		if n >= limit {
			break
		}
		if expired(r, now) {
			delete(s.records, scope)
			n++
		}
	}
	return n, nil
}

// Len reports how many records the store holds, expired ones included.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.records)
}

func copyRecord(r *idempotency.Record) idempotency.Record {
	c := *r
	if r.Response != nil {
		resp := copyResponse(*r.Response)
		c.Response = &resp
	}
	return c
}

func copyResponse(r idempotency.Response) idempotency.Response {
	return idempotency.Response{
		Status:      r.Status,
		Header:      http.Header(r.Header).Clone(),
		Body:        bytes.Clone(r.Body),
		BodyOmitted: r.BodyOmitted,
	}
}
