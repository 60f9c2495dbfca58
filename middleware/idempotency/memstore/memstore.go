package memstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/idemgate/idemgate/middleware/idempotency"
)

var (
	_ idempotency.Store     = (*Store)(nil)
	_ idempotency.Watcher   = (*Store)(nil)
	_ idempotency.Janitor   = (*Store)(nil)
	_ idempotency.Immediate = (*Store)(nil)

	_ idempotency.RequestCounter = (*Store)(nil)
)

// Store keeps records in memory. The zero value is not usable; call New.
type Store struct {
	now            func() time.Time
	maxBytes       int64 // 0: no bound
	maxTenantBytes int64 // 0: no share; a tenant may fill maxBytes

	mu          sync.Mutex
	records     map[idempotency.Scope]*record
	watchers    map[idempotency.Scope]map[chan struct{}]struct{}
	queue       []expiry         // the records' expiries, earliest first (expiry.go)
	bytes       int64            // the sum of the records' sizes
	tenantBytes map[string]int64 // the same sum for each tenant that holds a record
	refused     int64            // claims refused with ErrStoreFull
}

// record is a stored record. A completed one keeps its response headers
// and body encoded in one byte slice, which the garbage collector does not
// scan: a gateway keeps every record for its whole retention, and a header
// map per record would make each collection walk them all.
type record struct {
	idempotency.Record // Response is always nil here
	status             int
	omitted            bool
	completed          bool   // a response is stored
	response           []byte // encodeResponse: headers, then the body
	size               int64  // what the record counts against the bound
	queuedAt           int64  // its entry in the expiry queue (expiry.go)
	// requests counts the requests its key received (counts.go); nil
	// until the first are added.
	requests *idempotency.KeyCount
}

// recordOverhead is what a record costs beyond its strings and stored
// response: the struct, its map entry and its pointers, rounded up.
const recordOverhead = 256

// sizeOf is what r holds: its key, fingerprint and owner, the stored
// headers and body, and the fixed overhead.
func sizeOf(r *record) int64 {
	return recordOverhead + int64(len(r.Scope.Tenant)+len(r.Scope.Route)+len(r.Scope.Key)+
		len(r.Fingerprint)+len(r.Owner)+len(r.response))
}

// resize counts r's size again after a change. Callers hold mu.
func (s *Store) resize(r *record) {
	n := sizeOf(r)
	s.count(r.Scope.Tenant, n-r.size)
	r.size = n
}

// remove deletes the record of scope and its bytes. Callers hold mu.
func (s *Store) remove(scope idempotency.Scope) {
	if r := s.records[scope]; r != nil {
		s.count(scope.Tenant, -r.size)
		delete(s.records, scope)
	}
}

// count adds d bytes to the store's sum and to tenant's. A tenant that
// holds nothing leaves the map, so it holds only the tenants with
// records. Callers hold mu.
func (s *Store) count(tenant string, d int64) {
	s.bytes += d
	if n := s.tenantBytes[tenant] + d; n != 0 {
		s.tenantBytes[tenant] = n
	} else {
		delete(s.tenantBytes, tenant)
	}
}

// Option configures a Store.
type Option func(*Store)

// WithClock replaces time.Now, for tests that move time by hand.
func WithClock(now func() time.Time) Option { return func(s *Store) { s.now = now } }

// WithMaxBytes bounds what the records hold (keys, fingerprints, stored
// headers and bodies, and a fixed overhead each) to about n bytes: a
// claim of a key with no live record that would pass n is refused with
// idempotency.ErrStoreFull, which the middleware answers 503
// idempotency-store-full. No live record is ever evicted to make room —
// a retry would find no record and run again — and a claimed request's
// response is always stored, even past n: its request already ran, and
// the answer is what makes its retries safe. So the store can pass n by
// what the requests in flight store, at most one
// max_stored_response_bytes each. Room comes back as records expire and
// the janitor deletes them. n ≤ 0: no bound (the default).
func WithMaxBytes(n int64) Option { return func(s *Store) { s.maxBytes = max(n, 0) } }

// WithMaxBytesPerTenant bounds what the records of one tenant
// (idempotency.Scope.Tenant) hold to about n bytes, as WithMaxBytes
// bounds the whole store: a claim of a new key that would pass n is
// refused with idempotency.ErrStoreFull. So a tenant that fills its share
// is refused while the others still claim new keys, up to the store's
// bound. n ≤ 0: no share, any tenant may fill the whole store (the
// default).
func WithMaxBytesPerTenant(n int64) Option {
	return func(s *Store) { s.maxTenantBytes = max(n, 0) }
}

// New returns an empty store.
func New(opts ...Option) *Store {
	s := &Store{
		now:         time.Now,
		records:     make(map[idempotency.Scope]*record),
		watchers:    make(map[idempotency.Scope]map[chan struct{}]struct{}),
		tenantBytes: make(map[string]int64),
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

// live returns the unexpired record for scope, or nil. Callers hold mu.
func (s *Store) live(scope idempotency.Scope, now time.Time) *record {
	r := s.records[scope]
	if r == nil || expired(r, now) {
		return nil
	}
	return r
}

// expired: retention passed and no live lease holds the record.
func expired(r *record, now time.Time) bool {
	if r.State == idempotency.StateInFlight && r.LeaseUntil.After(now) {
		return false
	}
	return !r.ExpiresAt.After(now)
}

// Immediate implements idempotency.Immediate: every call only takes the
// store's mutex for a moment, so the middleware sets no deadline on it.
func (s *Store) Immediate() {}

// Claim implements idempotency.Store.
func (s *Store) Claim(_ context.Context, req idempotency.ClaimRequest) (idempotency.ClaimResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	old := s.records[req.Scope]
	r := s.live(req.Scope, now)
	switch {
	case r == nil:
		var last int64
		if old != nil {
			last = old.FencingToken
		}
		r = &record{Record: idempotency.Record{Scope: req.Scope, CreatedAt: now, FencingToken: nextToken(last, now)}}
		r.Fingerprint, r.Owner = req.Fingerprint, req.Owner
		if err := s.room(old, req.Scope.Tenant, sizeOf(r)); err != nil {
			return idempotency.ClaimResult{}, err
		}
		s.remove(req.Scope)
		s.records[req.Scope] = r
		s.take(r, req, now)
		s.queueExpiry(r)
		return idempotency.ClaimResult{Claimed: true, Record: copyRecord(r)}, nil
	case r.Fingerprint == req.Fingerprint &&
		(r.State == idempotency.StateReleased || (r.State == idempotency.StateInFlight && !r.LeaseUntil.After(now))):
		r.FencingToken = nextToken(r.FencingToken, now)
		s.take(r, req, now)
		return idempotency.ClaimResult{Claimed: true, TakeOver: true, Record: copyRecord(r)}, nil
	default:
		return idempotency.ClaimResult{Record: copyRecord(r)}, nil
	}
}

// nextToken is the fencing token after last: one more, or the clock in
// microseconds since 1970 when that is higher, as the PostgreSQL and Redis
// stores give, so that the three stores agree on what a token looks like
// and a test written against one holds for the others.
func nextToken(last int64, now time.Time) int64 {
	return max(last+1, now.UnixMicro())
}

// room refuses a new record of tenant, of size n, when the store would
// pass its bound or the tenant its share; old, the expired record it
// replaces, gives its bytes back. Callers hold mu.
func (s *Store) room(old *record, tenant string, n int64) error {
	var freed int64
	if old != nil {
		freed = old.size
	}
	if s.maxBytes > 0 && s.bytes-freed+n > s.maxBytes {
		s.refused++
		return fmt.Errorf("memstore: %d of %d bytes held: %w", s.bytes, s.maxBytes, idempotency.ErrStoreFull)
	}
	if held := s.tenantBytes[tenant]; s.maxTenantBytes > 0 && held-freed+n > s.maxTenantBytes {
		s.refused++
		return fmt.Errorf("memstore: tenant %q holds %d of its %d bytes: %w", tenant, held, s.maxTenantBytes, idempotency.ErrStoreFull)
	}
	return nil
}

func (s *Store) take(r *record, req idempotency.ClaimRequest, now time.Time) {
	r.Fingerprint = req.Fingerprint
	r.State = idempotency.StateInFlight
	r.Owner = req.Owner
	r.LeaseUntil = now.Add(req.Lease)
	r.completed, r.response = false, nil
	r.UpdatedAt = now
	r.ExpiresAt = now.Add(max(req.Retention, req.Lease))
	s.expiryMoved(r)
	s.resize(r)
}

// owned returns the in-flight record held by owner. Callers hold mu.
func (s *Store) owned(scope idempotency.Scope, owner string) (*record, time.Time, error) {
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
	r.completed, r.status, r.omitted = true, resp.Status, resp.BodyOmitted
	r.response = encodeResponse(resp)
	s.end(r, idempotency.StateCompleted, now)
	r.ExpiresAt = now.Add(retention)
	s.expiryMoved(r)
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

// end moves a record out of flight, counts its size again and wakes its
// watchers. Callers hold mu.
func (s *Store) end(r *record, state idempotency.State, now time.Time) {
	r.State = state
	r.Owner = ""
	r.LeaseUntil = time.Time{}
	r.UpdatedAt = now
	s.expiryMoved(r)
	s.resize(r)
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
	s.remove(scope)
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
	return s.deleteDue(s.now(), limit), nil
}

// Len reports how many records the store holds, expired ones included.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.records)
}

// Bytes reports what the records hold against the bound, expired ones
// included until the janitor deletes them.
func (s *Store) Bytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bytes
}

// MaxBytes reports the bound set with WithMaxBytes; 0 is none.
func (s *Store) MaxBytes() int64 { return s.maxBytes }

// MaxBytesPerTenant reports the share set with WithMaxBytesPerTenant; 0
// is none.
func (s *Store) MaxBytesPerTenant() int64 { return s.maxTenantBytes }

// Refused reports how many claims of new keys the bound or a tenant's
// share has refused.
func (s *Store) Refused() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refused
}

// copyRecord returns r as a Record of its own, response decoded.
func copyRecord(r *record) idempotency.Record {
	c := r.Record
	if r.completed {
		resp := decodeResponse(r.response)
		resp.Status, resp.BodyOmitted = r.status, r.omitted
		c.Response = &resp
	}
	return c
}

// encodeResponse packs resp's headers and body into one slice: the number
// of header names, then each name and its values, each length-prefixed,
// then the body. A body omitted is not kept.
func encodeResponse(resp idempotency.Response) []byte {
	n := binary.MaxVarintLen64 + len(resp.Body)
	for k, vs := range resp.Header {
		n += 2*binary.MaxVarintLen64 + len(k)
		for _, v := range vs {
			n += binary.MaxVarintLen64 + len(v)
		}
	}
	b := make([]byte, 0, n)
	b = binary.AppendUvarint(b, uint64(len(resp.Header)))
	for k, vs := range resp.Header {
		b = appendString(b, k)
		b = binary.AppendUvarint(b, uint64(len(vs)))
		for _, v := range vs {
			b = appendString(b, v)
		}
	}
	if !resp.BodyOmitted {
		b = append(b, resp.Body...)
	}
	return b
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// decodeResponse unpacks what encodeResponse wrote. The slice is the
// store's own, so a malformed one is a bug: it panics.
func decodeResponse(b []byte) idempotency.Response {
	var resp idempotency.Response
	uvarint := func() int {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			panic("memstore: corrupt stored response")
		}
		b = b[n:]
		return int(v)
	}
	str := func() string {
		l := uvarint()
		s := string(b[:l])
		b = b[l:]
		return s
	}
	if names := uvarint(); names > 0 {
		resp.Header = make(http.Header, names)
		for range names {
			k := str()
			vs := make([]string, uvarint())
			for i := range vs {
				vs[i] = str()
			}
			resp.Header[k] = vs
		}
	}
	if len(b) > 0 {
		resp.Body = bytes.Clone(b)
	}
	return resp
}
