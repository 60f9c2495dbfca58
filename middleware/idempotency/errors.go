package idempotency

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
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
	ErrStoreUnavailable = errors.New("idempotency store unavailable")
)

// RequestError is what the middleware passes to the ErrorHandler: one of
// the sentinels above, a detail safe to show the client, and how long the
// client should wait before retrying (zero for "don't").
type RequestError struct {
	Err        error
	Detail     string
	RetryAfter time.Duration
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

// Problem describes how one refusal is shown: its status and the slug of its
// problem type.
type Problem struct {
	Status int
	Slug   string
	Title  string
}

// ProblemFor maps a middleware error to its status and problem type. ok is
// false for an error that is not one of the middleware's.
func ProblemFor(err error) (p Problem, ok bool) {
	for _, row := range problems {
		if errors.Is(err, row.err) {
			return row.Problem, true
		}
	}
	return Problem{}, false
}

var problems = []struct {
	err error
	Problem
}{
	{ErrKeyMissing, Problem{http.StatusBadRequest, "idempotency-key-missing", "Idempotency-Key header missing"}},
	{ErrKeyInvalid, Problem{http.StatusBadRequest, "idempotency-key-invalid", "Idempotency-Key header invalid"}},
	{ErrKeyReused, Problem{http.StatusUnprocessableEntity, "idempotency-key-reused", "Idempotency-Key reused with a different request"}},
	{ErrKeyInUse, Problem{http.StatusConflict, "idempotency-key-in-use", "A request with this Idempotency-Key is in progress"}},
	{ErrOutcomeUnknown, Problem{http.StatusConflict, "idempotency-outcome-unknown", "The outcome of the original request is unknown"}},
	{ErrRequestTooLarge, Problem{http.StatusRequestEntityTooLarge, "request-too-large", "Request body too large"}},
	{ErrStoreUnavailable, Problem{http.StatusServiceUnavailable, "idempotency-store-unavailable", "Idempotency store unavailable"}},
}

// DefaultProblemBase prefixes problem type slugs.
const DefaultProblemBase = "https://idemgate.dev/problems/"

// DefaultErrorHandler writes err as application/problem+json (RFC 9457).
// Applications usually supply their own ErrorHandler to add a request id
// and their own problem base.
func DefaultErrorHandler(w http.ResponseWriter, r *http.Request, err error) {
	p, ok := ProblemFor(err)
	if !ok {
		p = Problem{http.StatusInternalServerError, "internal", "Internal error"}
	}
	body := map[string]any{
		"type":     DefaultProblemBase + p.Slug,
		"title":    p.Title,
		"status":   p.Status,
		"instance": r.URL.Path,
	}
	var re *RequestError
	if errors.As(err, &re) {
		body["detail"] = re.Detail
		SetRetryAfter(w.Header(), re.RetryAfter)
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(body)
}

// SetRetryAfter sets Retry-After in whole seconds, rounded up; d <= 0 sets
// nothing.
func SetRetryAfter(h http.Header, d time.Duration) {
	if d <= 0 {
		return
	}
	secs := int64((d + time.Second - 1) / time.Second)
	h.Set("Retry-After", strconv.FormatInt(secs, 10))
}
