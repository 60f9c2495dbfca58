package redisstore

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/middleware/idempotency/internal/headerjson"
)

var (
	_ idempotency.Store   = (*Store)(nil)
	_ idempotency.Watcher = (*Store)(nil)
)

// ErrClosed is returned by Watch after Close.
var ErrClosed = errors.New("redisstore: store closed")

// DefaultPrefix starts every key the store writes, unless WithPrefix says
// otherwise.
const DefaultPrefix = "idemgate:"

// Store keeps idempotency records in Redis, one hash per record. It is safe
// for concurrent use. Every call returns ctx's error as soon as ctx ends,
// whatever the client's timeouts (roundtrip.go). Close it to stop the
// pub/sub connection that Watch opens and to wait for round trips whose
// callers gave up; the Redis client stays the caller's.
type Store struct {
	client  redis.UniversalClient
	prefix  string
	scripts scripts

	pipelines, maxPipeline int
	pipe                   *pipeliner // nil: pipelining off
	wait                   waitFor    // WithWait (wait.go)
	flights                flights    // round trips on goroutines of their own

	// Watch state; see watch.go.
	mu       sync.Mutex
	closed   bool
	done     chan struct{}
	ps       *redis.PubSub
	channels map[string]map[*watch]struct{}
	markers  map[string]chan struct{}
	seq      uint64
	wg       sync.WaitGroup
}

// Option configures a Store.
type Option func(*Store)

// WithPrefix sets the string every key and channel of the store starts with
// (default DefaultPrefix), so that several deployments, or tests, can share
// one Redis. It should not contain '{' or '}': the record's hash tag must be
// the first pair of braces in the key for records to spread over a cluster.
func WithPrefix(prefix string) Option {
	return func(s *Store) { s.prefix = prefix }
}

// New returns a store on client: a *redis.Client, a *redis.ClusterClient or
// anything else that implements redis.UniversalClient.
func New(client redis.UniversalClient, opts ...Option) *Store {
	s := &Store{
		client:   client,
		prefix:   DefaultPrefix,
		scripts:  newScripts(),
		done:     make(chan struct{}),
		channels: make(map[string]map[*watch]struct{}),
		markers:  make(map[string]chan struct{}),
	}
	s.pipelines, s.maxPipeline = defaultPipelines, defaultMaxPipeline
	for _, opt := range opts {
		opt(s)
	}
	if s.pipelines > 0 && s.maxPipeline > 1 {
		s.pipe = &pipeliner{client: client, max: s.maxPipeline, slots: s.pipelines, flights: &s.flights, wait: s.wait}
	}
	return s
}

// key returns the record's key in this store.
func (s *Store) key(scope idempotency.Scope) string { return RecordKey(s.prefix, scope) }

// RecordKey is the key of scope's record in a store whose keys start with
// prefix (DefaultPrefix unless WithPrefix says otherwise): prefix +
// "idem:{" + 32 hex digits + "}". The digits are the first half of SHA-256
// over the length-prefixed tenant, route and key, so no contents of theirs
// can make two scopes meet, and the braces make the digits the cluster hash
// tag. The scope itself is kept in the hash and checked on every claim.
// Tools that read or write records directly (an operator's redis-cli, a
// benchmark's fill) find a record by it.
func RecordKey(prefix string, scope idempotency.Scope) string {
	var stack [256]byte
	b := stack[:0]
	b = binary.AppendUvarint(b, uint64(len(scope.Tenant)))
	b = append(b, scope.Tenant...)
	b = binary.AppendUvarint(b, uint64(len(scope.Route)))
	b = append(b, scope.Route...)
	b = append(b, scope.Key...)
	sum := sha256.Sum256(b)
	var digits [32]byte
	hex.Encode(digits[:], sum[:16])

	var k strings.Builder
	k.Grow(len(prefix) + len("idem:{}") + len(digits))
	k.WriteString(prefix)
	k.WriteString("idem:{")
	k.Write(digits[:])
	k.WriteByte('}')
	return k.String()
}

// millis converts d to whole milliseconds, at least one.
func millis(d time.Duration) int64 {
	return max(d.Milliseconds(), 1)
}

// Claim claims scope's record for req.Owner, or returns the record that
// stands in the way. One script, one round trip.
func (s *Store) Claim(ctx context.Context, req idempotency.ClaimRequest) (idempotency.ClaimResult, error) {
	sc := req.Scope
	// The script's key and arguments in one allocation, the arguments as
	// pointers: go-redis writes a *string or an *int64 as the value, and a
	// pointer goes into an interface as it is, where a string or an
	// integer is copied to the heap, one allocation each.
	a := &struct {
		req              idempotency.ClaimRequest
		keys             [1]string
		lease, retention int64
		flag             string
	}{req: req, keys: [1]string{s.key(sc)}, lease: millis(req.Lease), retention: millis(req.Retention), flag: s.wait.flag()}
	vals, err := s.hot(ctx, s.scripts.claim, true, a.keys[:],
		&a.req.Scope.Tenant, &a.req.Scope.Route, &a.req.Scope.Key, &a.req.Fingerprint, &a.req.Owner, &a.lease, &a.retention, &a.flag).Slice()
	if err != nil {
		return idempotency.ClaimResult{}, fmt.Errorf("redisstore: claim: %w", err)
	}
	if len(vals) < 2 {
		return idempotency.ClaimResult{}, fmt.Errorf("redisstore: claim: %w", errMalformed)
	}
	if claimed, _ := vals[0].(int64); claimed != 1 {
		rec, err := parseRecord(sc, vals[2:])
		if err != nil {
			return idempotency.ClaimResult{}, fmt.Errorf("redisstore: claim: %w", err)
		}
		return idempotency.ClaimResult{Record: rec}, nil
	}
	if len(vals) != 7 {
		return idempotency.ClaimResult{}, fmt.Errorf("redisstore: claim: %w", errMalformed)
	}
	p := fieldParser{v: vals}
	res := idempotency.ClaimResult{
		Claimed:  true,
		TakeOver: p.int(1) == 1,
		Record: idempotency.Record{
			Scope:        sc,
			Fingerprint:  req.Fingerprint,
			State:        idempotency.StateInFlight,
			FencingToken: p.int(2),
			Owner:        req.Owner,
			LeaseUntil:   p.time(3),
			CreatedAt:    p.time(4),
			UpdatedAt:    p.time(5),
			ExpiresAt:    p.time(6),
		},
	}
	if p.err != nil {
		return idempotency.ClaimResult{}, fmt.Errorf("redisstore: claim: %w", p.err)
	}
	return res, nil
}

// Renew extends the owner's lease.
func (s *Store) Renew(ctx context.Context, scope idempotency.Scope, owner string, lease time.Duration) error {
	n, err := roundTrip(ctx, &s.flights, func(ctx context.Context) (int64, error) {
		return s.run(ctx, s.scripts.renew, true, []string{s.key(scope)}, owner, millis(lease)).Int64()
	})
	if err != nil {
		return fmt.Errorf("redisstore: renew: %w", err)
	}
	if n != 1 {
		return idempotency.ErrNotOwner
	}
	return nil
}

// Complete stores resp and ends the owner's claim. The record then lives
// for retention from now.
func (s *Store) Complete(ctx context.Context, scope idempotency.Scope, owner string, resp idempotency.Response, retention time.Duration) error {
	header := headerjson.Append(make([]byte, 0, headerjson.Size(resp.Header)), resp.Header)
	body := resp.Body
	// The script's key and arguments in one allocation, as in Claim;
	// go-redis reads no []byte through a pointer, so the header and the
	// body go as they are.
	a := &struct {
		keys                 [1]string
		owner, omitted, flag string
		retention            int64
	}{keys: [1]string{s.key(scope)}, owner: owner, omitted: "0", flag: s.wait.flag(), retention: millis(retention)}
	if resp.BodyOmitted {
		body, a.omitted = nil, "1"
	}
	n, err := s.hot(ctx, s.scripts.complete, true, a.keys[:],
		&a.owner, resp.Status, header, body, &a.omitted, &a.retention, &a.flag).Int64()
	if err != nil {
		return fmt.Errorf("redisstore: complete: %w", err)
	}
	if n != 1 {
		return idempotency.ErrNotOwner
	}
	return nil
}

// Release marks the owner's attempt as not processed. It does not wait
// for replicas (docs/design/redis-store.md says why).
func (s *Store) Release(ctx context.Context, scope idempotency.Scope, owner string) error {
	return s.finish(ctx, scope, owner, idempotency.StateReleased, false)
}

// MarkUnknown holds the owner's ambiguous outcome for an operator.
func (s *Store) MarkUnknown(ctx context.Context, scope idempotency.Scope, owner string) error {
	return s.finish(ctx, scope, owner, idempotency.StateUnknown, true)
}

func (s *Store) finish(ctx context.Context, scope idempotency.Scope, owner string, state idempotency.State, waited bool) error {
	flag := "0"
	if waited {
		flag = s.wait.flag()
	}
	n, err := s.hot(ctx, s.scripts.finish, waited, []string{s.key(scope)}, owner, string(state), flag).Int64()
	if err != nil {
		return fmt.Errorf("redisstore: mark %s: %w", state, err)
	}
	if n != 1 {
		return idempotency.ErrNotOwner
	}
	return nil
}

// Get returns scope's record, or idempotency.ErrNotFound.
func (s *Store) Get(ctx context.Context, scope idempotency.Scope) (idempotency.Record, error) {
	vals, err := roundTrip(ctx, &s.flights, func(ctx context.Context) ([]any, error) {
		return s.run(ctx, s.scripts.get, true, []string{s.key(scope)}, s.wait.flag()).Slice()
	})
	if errors.Is(err, redis.Nil) {
		return idempotency.Record{}, idempotency.ErrNotFound
	}
	if err != nil {
		return idempotency.Record{}, fmt.Errorf("redisstore: get: %w", err)
	}
	rec, err := parseRecord(scope, vals)
	if err != nil {
		return idempotency.Record{}, fmt.Errorf("redisstore: get: %w", err)
	}
	return rec, nil
}

// Delete removes scope's record whatever its state.
func (s *Store) Delete(ctx context.Context, scope idempotency.Scope) error {
	_, err := roundTrip(ctx, &s.flights, func(ctx context.Context) (int64, error) {
		return s.client.Del(ctx, s.key(scope)).Result()
	})
	if err != nil {
		return fmt.Errorf("redisstore: delete: %w", err)
	}
	return nil
}

// Resolve turns an unknown outcome into a released one.
func (s *Store) Resolve(ctx context.Context, scope idempotency.Scope) error {
	n, err := roundTrip(ctx, &s.flights, func(ctx context.Context) (int64, error) {
		return s.scripts.resolve.Run(ctx, s.client, []string{s.key(scope)}).Int64()
	})
	if err != nil {
		return fmt.Errorf("redisstore: resolve: %w", err)
	}
	switch n {
	case 1:
		return nil
	case 0:
		return idempotency.ErrNotUnknown
	default:
		return idempotency.ErrNotFound
	}
}

var errMalformed = errors.New("malformed record")

// parseRecord reads the fields of record() in the scripts. Redis returns
// every field as a string, or nil when it is absent.
func parseRecord(scope idempotency.Scope, v []any) (idempotency.Record, error) {
	if len(v) != numFields {
		return idempotency.Record{}, errMalformed
	}
	p := fieldParser{v: v}
	rec := idempotency.Record{
		Scope:        scope,
		Fingerprint:  p.str(fieldFP),
		State:        idempotency.State(p.str(fieldState)),
		FencingToken: p.int(fieldToken),
		Owner:        p.str(fieldOwner),
		LeaseUntil:   p.time(fieldLease),
		CreatedAt:    p.time(fieldCreated),
		UpdatedAt:    p.time(fieldUpdated),
		ExpiresAt:    p.time(fieldExpires),
	}
	if rec.State == idempotency.StateCompleted {
		resp := &idempotency.Response{
			Status:      int(p.int(fieldStatus)),
			BodyOmitted: p.str(fieldOmitted) == "1",
		}
		if h := p.str(fieldHeader); h != "" && h != "null" {
			var header http.Header
			if err := json.Unmarshal([]byte(h), &header); err != nil {
				return idempotency.Record{}, fmt.Errorf("%w: header: %w", errMalformed, err)
			}
			resp.Header = header
		}
		if b := p.str(fieldBody); b != "" {
			resp.Body = []byte(b)
		}
		rec.Response = resp
	}
	if p.err != nil {
		return idempotency.Record{}, p.err
	}
	return rec, nil
}

// fieldParser keeps the first error, so parseRecord reads straight through.
type fieldParser struct {
	v   []any
	err error
}

func (p *fieldParser) str(i int) string {
	switch x := p.v[i].(type) {
	case string:
		return x
	case nil:
		return ""
	default:
		if p.err == nil {
			p.err = fmt.Errorf("%w: field %d is %T", errMalformed, i, x)
		}
		return ""
	}
}

func (p *fieldParser) int(i int) int64 {
	switch x := p.v[i].(type) {
	case int64:
		return x
	case nil:
		return 0
	}
	s := p.str(i)
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil && p.err == nil {
		p.err = fmt.Errorf("%w: field %d: %w", errMalformed, i, err)
	}
	return n
}

func (p *fieldParser) time(i int) time.Time {
	if p.v[i] == nil {
		return time.Time{}
	}
	return time.UnixMilli(p.int(i))
}
