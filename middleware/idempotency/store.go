package idempotency

import (
	"context"
	"errors"
	"net/http"
	"time"
)

// Scope addresses one idempotency record. A key is only ever compared within
// its (tenant, route): the same key sent by another tenant, or to another
// route, is a different record.
type Scope struct {
	Tenant string
	Route  string
	Key    string
}

// State is where a record stands.
type State string

const (
	// StateInFlight: a request holds the claim under a lease.
	StateInFlight State = "in_flight"
	// StateCompleted: the response is stored and every retry replays it.
	StateCompleted State = "completed"
	// StateReleased: the attempt was not processed (or its outcome was
	// released); the next request with the same fingerprint claims it again
	// with a higher fencing token.
	StateReleased State = "released"
	// StateUnknown: the outcome is ambiguous and held for an operator
	// (on_ambiguous: hold). Retries get 409 until it is resolved.
	StateUnknown State = "unknown"
)

// Response is what a completed record replays.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
	// BodyOmitted is set when the body was larger than the stored limit: the
	// status and headers are replayed, the body is not, and the request is
	// never executed again.
	BodyOmitted bool
}

// Record is a stored idempotency record.
type Record struct {
	Scope       Scope
	Fingerprint string
	State       State
	// FencingToken is at least 1 on the first claim and strictly higher on
	// every later claim of the same record (take-over after a lease
	// expired, or a new attempt after a release), and below 2^53 so that a
	// JavaScript number holds it exactly. pgstore and memstore start at 1;
	// redisstore starts from the Redis server's clock in microseconds, so
	// that a record Redis lost does not start again at 1.
	FencingToken int64
	// Owner is the random token of the attempt holding the claim; empty
	// unless State is StateInFlight.
	Owner      string
	LeaseUntil time.Time
	Response   *Response // set when State is StateCompleted
	CreatedAt  time.Time
	UpdatedAt  time.Time
	ExpiresAt  time.Time
}

// ClaimRequest asks a store to claim a record for one attempt.
type ClaimRequest struct {
	Scope       Scope
	Fingerprint string
	// Owner is a random token unique to this attempt; Renew, Complete,
	// Release and MarkUnknown succeed only for the owner.
	Owner     string
	Lease     time.Duration
	Retention time.Duration
}

// ClaimResult is the outcome of a claim.
type ClaimResult struct {
	// Claimed reports whether the caller now owns the record. When false,
	// Record is the existing record (completed, in flight, unknown, or with
	// another fingerprint) and the caller must not run the request.
	Claimed bool
	// TakeOver is true when the claim took over an expired lease or a
	// released record rather than creating a new one.
	TakeOver bool
	Record   Record
}

// Store keeps idempotency records. Every implementation must pass the
// conformance suite in package idempotencytest.
//
// Claim is atomic: of any number of concurrent claims for one scope, at most
// one returns Claimed. A claim succeeds when there is no live record, when
// the record's retention has passed, or, for the same fingerprint, when the
// record was released or its lease expired. Time is the store's own clock
// (the database's or Redis' time), so gateway clocks need not agree.
type Store interface {
	Claim(ctx context.Context, req ClaimRequest) (ClaimResult, error)
	// Renew extends the owner's lease. ErrNotOwner when the claim was lost.
	Renew(ctx context.Context, scope Scope, owner string, lease time.Duration) error
	// Complete stores the response and ends the claim. ErrNotOwner when the
	// claim was lost; the response is then not stored.
	Complete(ctx context.Context, scope Scope, owner string, resp Response, retention time.Duration) error
	// Release marks the attempt as not processed so a retry runs again.
	Release(ctx context.Context, scope Scope, owner string) error
	// MarkUnknown holds an ambiguous outcome for an operator.
	MarkUnknown(ctx context.Context, scope Scope, owner string) error
	// Get returns the record, or ErrNotFound. An expired record is not found.
	Get(ctx context.Context, scope Scope) (Record, error)
	// Delete removes a record whatever its state (operator repair).
	Delete(ctx context.Context, scope Scope) error
	// Resolve turns an unknown outcome into a released one, so the next
	// retry runs again. ErrNotFound when there is no record, ErrNotUnknown
	// when the record is in another state.
	Resolve(ctx context.Context, scope Scope) error
}

// Watcher is implemented by stores that can tell other processes that a
// record changed (completed, released, held). The middleware uses it to let
// a duplicate wait for the original (wait_in_flight) across gateway
// instances; it polls as well, so a missed notification only costs latency.
type Watcher interface {
	// Watch returns a channel that receives a value whenever the record for
	// scope may have changed, until stop is called or ctx ends.
	Watch(ctx context.Context, scope Scope) (changed <-chan struct{}, stop func(), err error)
}

// Immediate is implemented by stores whose calls never block: no network,
// no disk, no other process to wait for, only a lock held for a moment (the
// memory store). The middleware calls such a store without the
// CommitTimeout deadline it puts on every other store's writes, which such a
// store could not overrun and which would cost a timer and two contexts
// per call. A wrapper of a store should implement it only when the store
// it wraps does.
type Immediate interface {
	Store
	Immediate()
}

// Janitor is implemented by stores whose expired records must be deleted
// explicitly. DeleteExpired deletes at most limit expired records and
// reports how many it deleted.
type Janitor interface {
	DeleteExpired(ctx context.Context, limit int) (int, error)
}

var (
	// ErrNotFound: no live record for the scope.
	ErrNotFound = errors.New("idempotency: record not found")
	// ErrNotOwner: the caller no longer holds the claim.
	ErrNotOwner = errors.New("idempotency: claim not owned")
	// ErrNotUnknown: Resolve on a record whose outcome is not unknown.
	ErrNotUnknown = errors.New("idempotency: record outcome is not unknown")
	// ErrNotDurable: the store made the write but cannot say it would
	// survive a failover (redisstore.WithWait: too few replicas
	// acknowledged it in time). A store returns it wrapped from Claim,
	// Complete, MarkUnknown or Renew; calling again with the same owner
	// confirms the same write, never makes a second one. The middleware
	// treats it as a write not known to be durable: a claim is released
	// and refused with 503 whatever OnStoreError says, nothing having
	// run; a completion is stored again in the background and its answer
	// held back (503, Retry-After) until it is.
	ErrNotDurable = errors.New("idempotency: write not known to be durable")
)
