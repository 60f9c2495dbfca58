package idempotency

import (
	"crypto/rand"
	"encoding/hex"
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
	// Key is the parsed Idempotency-Key of the refused request; empty
	// when it had none or it could not be parsed.
	Key string
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

// Retryable reports whether the same request, with the same key, may simply
// be sent again: the answer means "not processed, try again" (a status
// ReleasesKey lists: 408, 425, 429, 502, 503, 504), or the original still
// runs (409 idempotency-key-in-use; the retry gets its answer once it
// ends). Any other problem needs the request, the key or an operator to
// change first: sent again as it is, it gets the same answer.
func (p Problem) Retryable() bool {
	return ReleasesKey(p.Status) || p.Slug == "idempotency-key-in-use"
}

// DraftURL is the IETF Idempotency-Key draft, which Documentation links to.
const DraftURL = "https://datatracker.ietf.org/doc/html/draft-ietf-httpapi-idempotency-key-header"

// Documentation returns the section of the Idempotency-Key draft the
// problem is about, or "" for a problem the draft does not cover. It is the
// problem document's documentation member and its Link rel="describedby".
func (p Problem) Documentation() string {
	switch p.Slug {
	case "idempotency-key-missing", "idempotency-key-invalid":
		return DraftURL + "#section-2.1" // Syntax
	case "idempotency-key-reused":
		return DraftURL + "#section-2.2" // Uniqueness of Idempotency Key
	case "idempotency-key-in-use", "idempotency-outcome-unknown":
		return DraftURL + "#section-2.6" // Idempotency Enforcement Scenarios
	}
	return ""
}

// SetDocumentationLink sets the Link header of a problem whose
// Documentation is url (RFC 8288, as the draft's error examples show it);
// an empty url sets nothing.
func SetDocumentationLink(h http.Header, url string) {
	if url != "" {
		h.Set("Link", "<"+url+`>; rel="describedby"; type="text/html"`)
	}
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
	{ErrNotIJSON, Problem{http.StatusBadRequest, "bad-request", "Bad request"}},
}

// DefaultProblemBase prefixes problem type slugs.
const DefaultProblemBase = "https://idemgate.dev/problems/"

// DefaultErrorHandler writes err as application/problem+json (RFC 9457):
// type, title, status, detail, instance (a fresh urn:uuid: naming this
// occurrence), retryable, idempotency_key when the request had one, and
// documentation (also sent as Link) when the draft covers the problem.
// Applications usually supply their own ErrorHandler to add a request id,
// and instance from it, and their own problem base.
func DefaultErrorHandler(w http.ResponseWriter, r *http.Request, err error) {
	p, ok := ProblemFor(err)
	if !ok {
		p = Problem{http.StatusInternalServerError, "internal", "Internal error"}
	}
	body := map[string]any{
		"type":      DefaultProblemBase + p.Slug,
		"title":     p.Title,
		"status":    p.Status,
		"instance":  "urn:uuid:" + newUUIDv4(),
		"retryable": p.Retryable(),
	}
	var re *RequestError
	if errors.As(err, &re) {
		body["detail"] = re.Detail
		if re.Key != "" {
			body["idempotency_key"] = re.Key
		}
		SetRetryAfter(w.Header(), re.RetryAfter)
	}
	if doc := p.Documentation(); doc != "" {
		body["documentation"] = doc
		SetDocumentationLink(w.Header(), doc)
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(body)
}

// newUUIDv4 returns a random UUID (RFC 9562, version 4).
func newUUIDv4() string {
	var u [16]byte
	_, _ = rand.Read(u[:])
	u[6] = 0x40 | u[6]&0x0f
	u[8] = 0x80 | u[8]&0x3f
	h := hex.EncodeToString(u[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
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
