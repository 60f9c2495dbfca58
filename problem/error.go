package problem

import "time"

// Error is the one error carrier from a refusal to its answer. Code that
// refuses a request returns it, and a Writer renders it. Err is the
// reason, a sentinel a Table maps to a problem type. Detail is safe to
// show the client, Cause is not.
type Error struct {
	// Err is the reason: the sentinel a Table looks up.
	Err error
	// Detail is the document's detail member. Empty means the type's
	// title, or the Writer's Unexplained for a 5xx.
	Detail string
	// RetryAfter is how long the client should wait before retrying.
	// Zero means no Retry-After header.
	RetryAfter time.Duration
	// Key is the parsed Idempotency-Key of the refused request. Empty
	// when it had none or it could not be parsed.
	Key string
	// AcceptEncoding, on a refusal of a request body's Content-Encoding,
	// lists the codings that are accepted (the answer's Accept-Encoding,
	// RFC 9110, section 12.5.3).
	AcceptEncoding string
	// Fields names what is wrong with a request body, field by field
	// (a job payload that breaks its schema).
	Fields []FieldFault
	// Cause is the underlying error. It is logged, never shown.
	Cause error
}

func (e *Error) Error() string {
	if e.Cause != nil {
		return e.Err.Error() + ": " + e.Cause.Error()
	}
	return e.Err.Error() + ": " + e.Detail
}

// Unwrap returns the reason and, when there is one, the cause, so that
// errors.Is matches either.
func (e *Error) Unwrap() []error {
	if e.Cause != nil {
		return []error{e.Err, e.Cause}
	}
	return []error{e.Err}
}

// FieldFault is one fault of one field of a request body, as a problem
// document's errors member lists it. Field is the field's path, dotted
// with array indices in brackets (items[2].sku). The empty Field is the
// whole body.
type FieldFault struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}
