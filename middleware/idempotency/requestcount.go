package idempotency

import (
	"context"
	"time"
)

// KeyCount is how many requests of each kind one key received while its
// record lived. The kinds are those of the middleware's outcome, as the
// operator console names them: new, replayed, conflict, mismatch and
// released.
type KeyCount struct {
	Scope Scope
	// New counts the requests that claimed the record and ran.
	New int64
	// Replayed counts the requests answered with the stored response.
	Replayed int64
	// Conflict counts the requests answered 409: the record was in flight
	// or its outcome unknown.
	Conflict int64
	// Mismatch counts the requests answered 422: the key reused with
	// another request.
	Mismatch int64
	// Released counts the requests whose attempt was released, so that a
	// retry runs again.
	Released int64
	// First is when the earliest counted request ended. It is zero when
	// none was counted.
	First time.Time
	// Last is when the latest counted request ended. It is zero when none
	// was counted.
	Last time.Time
}

// Total is the number of requests k counts.
func (k KeyCount) Total() int64 {
	return k.New + k.Replayed + k.Conflict + k.Mismatch + k.Released
}

// Add adds o's counts to k and widens k's first and last times to o's.
// o's Scope is ignored.
func (k *KeyCount) Add(o KeyCount) {
	k.New += o.New
	k.Replayed += o.Replayed
	k.Conflict += o.Conflict
	k.Mismatch += o.Mismatch
	k.Released += o.Released
	if !o.First.IsZero() && (k.First.IsZero() || o.First.Before(k.First)) {
		k.First = o.First
	}
	if o.Last.After(k.Last) {
		k.Last = o.Last
	}
}

// RequestCounter is implemented by stores that keep, beside each record,
// how many requests its key received (KeyCount). The counts live exactly as
// long as the record: they expire with it, the janitor and Delete remove
// them with it, and a record created afresh after its key expired starts
// from zero. A take-over of a released or abandoned record keeps them, as
// it keeps the record. A store implements it optionally; callers check by
// type assertion.
//
// The gateway adds counts in batches, about once a second, off the
// request path, so counts lag the requests by up to that long and a crash
// loses what was not yet added.
type RequestCounter interface {
	// AddRequests adds each count to the live record of its scope. A
	// scope without a live record is skipped: its counts went with it.
	AddRequests(ctx context.Context, counts []KeyCount) error
	// RequestCounts returns the counts of scope's live record, zero when
	// none were added yet, or ErrNotFound when there is no live record.
	RequestCounts(ctx context.Context, scope Scope) (KeyCount, error)
}
