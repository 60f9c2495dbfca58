package idempotency

import (
	"errors"

	"github.com/idemgate/idemgate/problem"
)

// The reasons the middleware refuses a request, each carried by a
// *problem.Error. The ErrorHandler maps them to statuses, and
// DefaultErrorHandler uses Refusals, the table of the HTTP contract.
var (
	ErrKeyMissing       = errors.New("idempotency key missing")
	ErrKeyInvalid       = errors.New("idempotency key invalid")
	ErrKeyReused        = errors.New("idempotency key reused with a different request")
	ErrKeyInUse         = errors.New("idempotency key in use by a request in flight")
	ErrOutcomeUnknown   = errors.New("outcome of the original request is unknown")
	ErrRequestTooLarge  = errors.New("request body too large")
	ErrEncodingRefused  = errors.New("request content encoding not accepted")
	ErrStoreUnavailable = errors.New("idempotency store unavailable")
	// ErrStoreFull: the store holds as much as it may and takes no new
	// key until records expire. A store returns it (wrapped) from Claim,
	// only for a key it has no live record of.
	ErrStoreFull = errors.New("idempotency store full")
)

// RequestError is the error carrier, problem.Error.
//
// Deprecated: use problem.Error.
type RequestError = problem.Error

// FieldFault is one fault of one field of a request body, problem.FieldFault.
//
// Deprecated: use problem.FieldFault.
type FieldFault = problem.FieldFault
