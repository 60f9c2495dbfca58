package idempotency

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/idemgate/idemgate/ijson"
)

// ProblemType is one row of a ProblemTable: the error it answers, the
// status, and the slug and title of its problem type (RFC 9457).
type ProblemType struct {
	Err    error
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
func (p ProblemType) Retryable() bool {
	return ReleasesKey(p.Status) || p.Slug == "idempotency-key-in-use"
}

// DraftURL is the IETF Idempotency-Key draft, which Documentation links to.
const DraftURL = "https://datatracker.ietf.org/doc/html/draft-ietf-httpapi-idempotency-key-header"

// Documentation returns the section of the Idempotency-Key draft the
// problem is about, or "" for a problem the draft does not cover. It is the
// problem document's documentation member and its Link rel="describedby".
func (p ProblemType) Documentation() string {
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

// ProblemTable maps errors to problem types: the first row whose Err the
// error matches (errors.Is) answers it.
type ProblemTable []ProblemType

// Lookup returns the row that answers err; ok is false when none does.
func (t ProblemTable) Lookup(err error) (p ProblemType, ok bool) {
	for _, row := range t {
		if errors.Is(err, row.Err) {
			return row, true
		}
	}
	return ProblemType{}, false
}

// Refusals returns the middleware's own rows. An application that answers
// errors of its own appends its rows to them, so that one table serves
// both.
func Refusals() ProblemTable { return slices.Clone(refusals) }

var refusals = ProblemTable{
	{ErrKeyMissing, http.StatusBadRequest, "idempotency-key-missing", "Idempotency-Key header missing"},
	{ErrKeyInvalid, http.StatusBadRequest, "idempotency-key-invalid", "Idempotency-Key header invalid"},
	{ErrKeyReused, http.StatusUnprocessableEntity, "idempotency-key-reused", "Idempotency-Key reused with a different request"},
	{ErrKeyInUse, http.StatusConflict, "idempotency-key-in-use", "A request with this Idempotency-Key is in progress"},
	{ErrOutcomeUnknown, http.StatusConflict, "idempotency-outcome-unknown", "The outcome of the original request is unknown"},
	{ErrRequestTooLarge, http.StatusRequestEntityTooLarge, "request-too-large", "Request body too large"},
	{ErrEncodingRefused, http.StatusUnsupportedMediaType, "unsupported-content-encoding", "Content-Encoding not accepted"},
	{ErrStoreUnavailable, http.StatusServiceUnavailable, "idempotency-store-unavailable", "Idempotency store unavailable"},
	{ErrStoreFull, http.StatusServiceUnavailable, "idempotency-store-full", "Idempotency store full"},
	{ijson.ErrNotIJSON, http.StatusBadRequest, "bad-request", "Bad request"},
}

// internalError answers an error no row matches.
var internalError = ProblemType{Status: http.StatusInternalServerError, Slug: "internal", Title: "Internal error"}

// DefaultProblemBase prefixes problem type slugs.
const DefaultProblemBase = "https://idemgate.dev/problems/"

// ProblemWriter renders errors as application/problem+json (RFC 9457).
// Besides the RFC's members a document names its occurrence (instance),
// says whether the same request may be sent again (retryable), names the
// key it concerns (idempotency_key) and links the draft's section
// (documentation, and Link rel="describedby"), so a generic client can act
// on it. The parts of the answer come from the error's *RequestError; an
// error no row of Table matches is a 500 whose detail says nothing of it.
// The zero value writes the middleware's refusals (DefaultErrorHandler).
type ProblemWriter struct {
	// Base prefixes the slugs. Default DefaultProblemBase.
	Base string
	// Table maps errors to problem types. Default Refusals().
	Table ProblemTable
	// Occurrence names the request: its id (the document's request_id)
	// and the URI of this occurrence (instance). Default: no request_id,
	// and a fresh urn:uuid: as instance.
	Occurrence func(*http.Request) (requestID, instance string)
	// Logger receives the causes of 5xx answers, which their documents
	// do not show; nil logs nothing.
	Logger *slog.Logger
	// Unexplained is the detail of a 5xx answer whose error carries none.
	// Default "the server could not complete the request".
	Unexplained string
	// Challenge is the WWW-Authenticate header of a 401 whose handler did
	// not set its own; empty: none.
	Challenge string
}

// problemDocument is the document a ProblemWriter writes; its members and
// their order are the Problem schema of the gateway's OpenAPI description.
type problemDocument struct {
	Type           string       `json:"type"`
	Title          string       `json:"title"`
	Status         int          `json:"status"`
	Detail         string       `json:"detail"`
	Instance       string       `json:"instance"`
	RequestID      *string      `json:"request_id,omitempty"`
	Retryable      bool         `json:"retryable"`
	IdempotencyKey *string      `json:"idempotency_key,omitempty"`
	Documentation  string       `json:"documentation,omitempty"`
	Errors         []FieldFault `json:"errors,omitempty"`
}

// Write writes err as a problem document.
func (pw ProblemWriter) Write(w http.ResponseWriter, r *http.Request, err error) {
	table := pw.Table
	if table == nil {
		table = refusals
	}
	p, known := table.Lookup(err)
	if !known {
		p = internalError
	}
	doc := problemDocument{Status: p.Status, Title: p.Title, Retryable: p.Retryable(), Documentation: p.Documentation()}
	doc.Type = pw.Base + p.Slug
	if pw.Base == "" {
		doc.Type = DefaultProblemBase + p.Slug
	}
	var retryAfter time.Duration
	acceptEncoding := ""
	if re, ok := errors.AsType[*RequestError](err); ok {
		doc.Detail, doc.Errors, retryAfter, acceptEncoding = re.Detail, re.Fields, re.RetryAfter, re.AcceptEncoding
		if re.Key != "" || errors.Is(err, errKeyEmpty) {
			doc.IdempotencyKey = &re.Key
		}
	}
	if a, ok := AttemptFrom(r.Context()); ok && doc.IdempotencyKey == nil {
		doc.IdempotencyKey = &a.Scope.Key // an error of the request running under its claim
	}
	id := ""
	if pw.Occurrence != nil {
		id, doc.Instance = pw.Occurrence(r)
		doc.RequestID = &id
	} else {
		doc.Instance = "urn:uuid:" + newUUIDv4()
	}
	if p.Status >= 500 {
		if !known || doc.Detail == "" {
			doc.Detail = pw.Unexplained
			if doc.Detail == "" {
				doc.Detail = "the server could not complete the request"
			}
		}
		if pw.Logger != nil {
			pw.Logger.ErrorContext(r.Context(), "request failed", "request_id", id,
				"method", r.Method, "path", r.URL.Path, "status", p.Status, "err", err)
		}
	}
	if doc.Detail == "" {
		doc.Detail = p.Title
	}
	b, _ := json.Marshal(doc)
	h := w.Header()
	SetRetryAfter(h, retryAfter)
	if acceptEncoding != "" {
		h.Set("Accept-Encoding", acceptEncoding)
	}
	if p.Status == http.StatusUnauthorized && pw.Challenge != "" && h.Get("WWW-Authenticate") == "" {
		h.Set("WWW-Authenticate", pw.Challenge)
	}
	SetDocumentationLink(h, doc.Documentation)
	h.Set("Content-Type", "application/problem+json")
	h.Set("Content-Length", strconv.Itoa(len(b)+1))
	h.Del("ETag")
	w.WriteHeader(p.Status)
	_, _ = w.Write(append(b, '\n'))
}

// DefaultErrorHandler writes err as the zero ProblemWriter does: types
// under DefaultProblemBase, instance a fresh urn:uuid: naming this
// occurrence, no request_id. Applications usually supply their own
// ErrorHandler, a ProblemWriter's Write, to add a request id, instance
// from it, their own problem base and the rows of their own errors.
func DefaultErrorHandler(w http.ResponseWriter, r *http.Request, err error) {
	ProblemWriter{}.Write(w, r, err)
}

// SetDocumentationLink sets the Link header of a problem whose
// Documentation is url (RFC 8288, as the draft's error examples show it);
// an empty url sets nothing.
func SetDocumentationLink(h http.Header, url string) {
	if url != "" {
		h.Set("Link", "<"+url+`>; rel="describedby"; type="text/html"`)
	}
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
