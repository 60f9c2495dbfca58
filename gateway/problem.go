package gateway

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/middleware/auth"
	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/middleware/ratelimit"
	"github.com/idemgate/idemgate/middleware/requestid"
	"github.com/idemgate/idemgate/openapi"
)

// Errors the gateway itself detects.
var (
	ErrNotFound            = errors.New("not found")
	ErrUpstreamUnavailable = errors.New("upstream unavailable")
	ErrUpstreamTimeout     = errors.New("upstream timeout")
	ErrNotReady            = errors.New("not ready")
	ErrBadRequest          = errors.New("bad request")
	ErrInvalidPayload      = errors.New("invalid payload")
	ErrQueueUnavailable    = errors.New("queue unavailable")
)

// Problem is an error with the detail a client may see. Cause is logged,
// never shown. It is the gateway's own: idempotency.RequestError carries
// the same parts for the middleware's refusals (and the refused key), and
// stays there because the middleware imports nothing of the gateway; the
// problem writer reads both.
type Problem struct {
	Err        error
	Detail     string
	RetryAfter time.Duration
	Cause      error
	// Fields names the bad fields of a payload (400/422).
	Fields []job.FieldError
}

func (p *Problem) Error() string {
	if p.Cause != nil {
		return p.Err.Error() + ": " + p.Cause.Error()
	}
	return p.Err.Error() + ": " + p.Detail
}

func (p *Problem) Unwrap() []error { return []error{p.Err, p.Cause} }

// kind is one row of the table that maps errors to problem documents.
type kind struct {
	err    error
	status int
	slug   string
	title  string
}

// kinds is the gateway's whole error contract (the middleware's own rows
// come from idempotency.ProblemFor).
var kinds = []kind{
	{auth.ErrUnauthorized, http.StatusUnauthorized, "unauthorized", "Missing or invalid credentials"},
	{ratelimit.ErrLimited, http.StatusTooManyRequests, "rate-limited", "Rate limit exceeded"},
	{ErrNotFound, http.StatusNotFound, "not-found", "Not found"},
	{ErrUpstreamUnavailable, http.StatusBadGateway, "upstream-unavailable", "Upstream unavailable"},
	{ErrUpstreamTimeout, http.StatusGatewayTimeout, "upstream-timeout", "Upstream timed out"},
	{ErrNotReady, http.StatusServiceUnavailable, "not-ready", "Not ready"},
	{ErrBadRequest, http.StatusBadRequest, "bad-request", "Bad request"},
	{ErrInvalidPayload, http.StatusUnprocessableEntity, "invalid-payload", "Invalid payload"},
	{ErrQueueUnavailable, http.StatusServiceUnavailable, "queue-unavailable", "Queue unavailable"},
}

// problem is the row as the idempotency package describes problems, so
// that both tables answer Retryable and Documentation by one rule.
func (k kind) problem() idempotency.Problem {
	return idempotency.Problem{Status: k.status, Slug: k.slug, Title: k.title}
}

func lookupKind(err error) (kind, bool) {
	if p, ok := idempotency.ProblemFor(err); ok {
		return kind{status: p.Status, slug: p.Slug, title: p.Title}, true
	}
	for _, k := range kinds {
		if errors.Is(err, k.err) {
			return k, true
		}
	}
	return kind{}, false
}

// problemWriter renders every error the gateway answers with, as
// application/problem+json (RFC 9457). It is the only place that turns an
// error into a status. Besides the RFC's members a document names its
// occurrence (instance: the request id as a urn:uuid:), says whether the
// same request may be sent again (retryable), names the key it concerns
// (idempotency_key) and links the draft's section (documentation, and
// Link rel="describedby"), so a generic client can act on it.
type problemWriter struct {
	base   string
	logger *slog.Logger
	// challenge is the WWW-Authenticate header of a 401 whose handler
	// did not set its own (the admin API names its realm); empty: none.
	challenge string
}

// WriteProblem writes err as a problem document the way the gateway writes
// its own, with types under base, so that a listener outside the gateway
// (the worker's admin listener) answers in the same form. logger receives
// the causes of 5xx answers; nil means slog.Default.
func WriteProblem(w http.ResponseWriter, r *http.Request, base string, logger *slog.Logger, err error) {
	if logger == nil {
		logger = slog.Default()
	}
	problemWriter{base: base, logger: logger}.write(w, r, err)
}

func (pw problemWriter) write(w http.ResponseWriter, r *http.Request, err error) {
	k, known := lookupKind(err)
	if !known {
		k = kind{status: http.StatusInternalServerError, slug: "internal", title: "Internal error"}
	}
	detail, retryAfter, key := "", time.Duration(0), ""
	var fields []job.FieldError
	var p *Problem
	var ire *idempotency.RequestError
	var rle *ratelimit.LimitedError
	switch {
	case errors.As(err, &p):
		detail, retryAfter, fields = p.Detail, p.RetryAfter, p.Fields
	case errors.As(err, &ire):
		detail, retryAfter, key = ire.Detail, ire.RetryAfter, ire.Key
	case errors.As(err, &rle):
		detail, retryAfter = "too many requests for this tenant; retry after the delay in Retry-After", rle.RetryAfter
	}
	if a, ok := idempotency.AttemptFrom(r.Context()); ok && key == "" {
		key = a.Scope.Key // an error of the request running under its claim
	}
	if k.status >= 500 {
		// 5xx details are fixed text; the cause goes to the log only.
		if !known || detail == "" {
			detail = "the gateway could not complete the request"
		}
		pw.logger.ErrorContext(r.Context(), "request failed", "request_id", requestid.FromContext(r.Context()),
			"method", r.Method, "path", r.URL.Path, "status", k.status, "err", err)
	}
	if detail == "" {
		detail = k.title
	}
	if retryAfter > 0 {
		idempotency.SetRetryAfter(w.Header(), retryAfter)
	}
	id := requestid.FromContext(r.Context())
	body := openapi.Problem{
		Type:      pw.base + k.slug,
		Title:     k.title,
		Status:    k.status,
		Detail:    detail,
		Instance:  requestid.URN(id),
		RequestId: id,
		Retryable: k.problem().Retryable(),
	}
	if key != "" {
		body.IdempotencyKey = &key
	}
	doc := k.problem().Documentation()
	if doc != "" {
		body.Documentation = &doc
	}
	if len(fields) > 0 {
		errs := make([]openapi.FieldError, len(fields))
		for i, f := range fields {
			errs[i] = openapi.FieldError{Field: f.Field, Message: f.Message}
		}
		body.Errors = &errs
	}
	b, _ := json.Marshal(body)
	h := w.Header()
	if k.status == http.StatusUnauthorized && pw.challenge != "" && h.Get("WWW-Authenticate") == "" {
		h.Set("WWW-Authenticate", pw.challenge)
	}
	idempotency.SetDocumentationLink(h, doc)
	h.Set("Content-Type", "application/problem+json")
	h.Set("Content-Length", strconv.Itoa(len(b)+1))
	h.Del("ETag")
	w.WriteHeader(k.status)
	_, _ = w.Write(append(b, '\n'))
}
