package idempotency

import (
	"errors"
	"net/http"
	"slices"
	"time"

	"github.com/idemgate/idemgate/ijson"
	"github.com/idemgate/idemgate/problem"
)

// ProblemType is one problem type and the error it answers, problem.Type.
//
// Deprecated: use problem.Type.
type ProblemType = problem.Type

// ProblemTable maps errors to problem types, problem.Table.
//
// Deprecated: use problem.Table.
type ProblemTable = problem.Table

// DraftURL is the IETF Idempotency-Key draft, which the refusals'
// documentation links to.
const DraftURL = "https://datatracker.ietf.org/doc/html/draft-ietf-httpapi-idempotency-key-header"

// The sections of the draft the refusals are about.
const (
	draftSyntax      = DraftURL + "#section-2.1" // Syntax
	draftUniqueness  = DraftURL + "#section-2.2" // Uniqueness of Idempotency Key
	draftEnforcement = DraftURL + "#section-2.6" // Idempotency Enforcement Scenarios
)

// Refusals returns the middleware's own rows. An application that answers
// errors of its own appends its rows to them, so that one table serves
// both.
func Refusals() problem.Table { return slices.Clone(refusals) }

var refusals = problem.Table{
	{Err: ErrKeyMissing, Status: http.StatusBadRequest, Slug: "idempotency-key-missing", Title: "Idempotency-Key header missing", DocURL: draftSyntax},
	{Err: ErrKeyInvalid, Status: http.StatusBadRequest, Slug: "idempotency-key-invalid", Title: "Idempotency-Key header invalid", DocURL: draftSyntax},
	{Err: ErrKeyReused, Status: http.StatusUnprocessableEntity, Slug: "idempotency-key-reused", Title: "Idempotency-Key reused with a different request", DocURL: draftUniqueness},
	{Err: ErrKeyInUse, Status: http.StatusConflict, Slug: "idempotency-key-in-use", Title: "A request with this Idempotency-Key is in progress", Pending: true, DocURL: draftEnforcement},
	{Err: ErrOutcomeUnknown, Status: http.StatusConflict, Slug: "idempotency-outcome-unknown", Title: "The outcome of the original request is unknown", DocURL: draftEnforcement},
	{Err: ErrRequestTooLarge, Status: http.StatusRequestEntityTooLarge, Slug: "request-too-large", Title: "Request body too large"},
	{Err: ErrEncodingRefused, Status: http.StatusUnsupportedMediaType, Slug: "unsupported-content-encoding", Title: "Content-Encoding not accepted"},
	{Err: ErrStoreUnavailable, Status: http.StatusServiceUnavailable, Slug: "idempotency-store-unavailable", Title: "Idempotency store unavailable"},
	{Err: ErrStoreFull, Status: http.StatusServiceUnavailable, Slug: "idempotency-store-full", Title: "Idempotency store full"},
	{Err: ijson.ErrNotIJSON, Status: http.StatusBadRequest, Slug: "bad-request", Title: "Bad request"},
}

// DefaultProblemBase prefixes problem type slugs, problem.DefaultBase.
//
// Deprecated: use problem.DefaultBase.
const DefaultProblemBase = problem.DefaultBase

// ProblemKey names the Idempotency-Key a problem concerns when its error
// carries none: the empty key a client sent, or the key of the claim the
// request runs under. It is the problem.Writer's Key of an application
// that wraps its handlers in the middleware.
func ProblemKey(r *http.Request, err error) (key string, ok bool) {
	if errors.Is(err, errKeyEmpty) {
		return "", true
	}
	if a, ok := AttemptFrom(r.Context()); ok {
		return a.Scope.Key, true // an error of the request running under its claim
	}
	return "", false
}

// ProblemWriter is a problem.Writer whose zero value writes the
// middleware's refusals. Its Table defaults to Refusals() and its Key to
// ProblemKey.
//
// Deprecated: use problem.Writer, with Refusals() in its Table and
// ProblemKey as its Key.
type ProblemWriter problem.Writer

// Write writes err as a problem document.
func (pw ProblemWriter) Write(w http.ResponseWriter, r *http.Request, err error) {
	problemWriter(problem.Writer(pw)).Write(w, r, err)
}

// problemWriter fills in the middleware's defaults: its refusals and the
// key of its claim.
func problemWriter(pw problem.Writer) problem.Writer {
	if pw.Table == nil {
		pw.Table = refusals
	}
	if pw.Key == nil {
		pw.Key = ProblemKey
	}
	return pw
}

// DefaultErrorHandler writes err as a problem.Writer with the middleware's
// refusals does: types under problem.DefaultBase, instance a fresh
// urn:uuid: naming this occurrence, no request_id. Applications usually
// supply their own ErrorHandler, a problem.Writer's Write, to add a request
// id, instance from it, their own problem base and the rows of their own
// errors.
func DefaultErrorHandler(w http.ResponseWriter, r *http.Request, err error) {
	problemWriter(problem.Writer{}).Write(w, r, err)
}

// SetDocumentationLink sets the Link header of a problem whose
// documentation is url. An empty url sets nothing.
//
// Deprecated: use problem.SetDocumentationLink.
func SetDocumentationLink(h http.Header, url string) { problem.SetDocumentationLink(h, url) }

// SetRetryAfter sets Retry-After in whole seconds, rounded up. A d of zero
// or less sets nothing.
//
// Deprecated: use problem.SetRetryAfter.
func SetRetryAfter(h http.Header, d time.Duration) { problem.SetRetryAfter(h, d) }
