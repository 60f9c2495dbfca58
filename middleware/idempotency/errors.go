package idempotency

import (
	"errors"
	"time"
)

// The reasons the middleware refuses a request. The ErrorHandler maps them
// to statuses; DefaultErrorHandler uses the table of the HTTP contract.
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

// RequestError is the one error carrier from a refusal to its answer: what
// the middleware passes to the ErrorHandler, and what an application built
// on it (the gateway, the rate limiter) passes to a ProblemWriter for its
// own refusals. Err is the reason, a sentinel a ProblemTable maps to a
// status; Detail is safe to show the client, Cause is not.
type RequestError struct {
	Err    error
	Detail string
	// RetryAfter is how long the client should wait before retrying
	// (zero for "don't").
	RetryAfter time.Duration
	// Key is the parsed Idempotency-Key of the refused request; empty
	// when it had none or it could not be parsed.
	Key string
	// AcceptEncoding, on a refusal of a request body's Content-Encoding,
	// lists the codings that are accepted (the answer's Accept-Encoding,
	// RFC 9110, section 12.5.3).
	AcceptEncoding string
	// Fields names what is wrong with a request body, field by field
	// (a job payload that breaks its schema).
	Fields []FieldFault
	// Cause is the underlying error (for logs only; never shown).
	Cause error
}

func (e *RequestError) Error() string {
	if e.Cause != nil {
		return e.Err.Error() + ": " + e.Cause.Error()
	}
	return e.Err.Error() + ": " + e.Detail
}

func (e *RequestError) Unwrap() []error {
	if e.Cause != nil {
		return []error{e.Err, e.Cause}
	}
	return []error{e.Err}
}

// FieldFault is one fault of one field of a request body, as a problem
// document's errors member lists it. Field is the field's path, dotted
// with array indices in brackets (items[2].sku); "" is the whole body.
type FieldFault struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}
