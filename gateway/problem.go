package gateway

import (
	"errors"
	"log/slog"
	"net/http"

	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/middleware/auth"
	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/middleware/ratelimit"
	"github.com/idemgate/idemgate/middleware/requestid"
	"github.com/idemgate/idemgate/problem"
)

// Errors the gateway itself detects. The gateway refuses a request with a
// *problem.Error wrapping one of them: the detail a client may see apart
// from the cause it logs.
var (
	ErrNotFound            = errors.New("not found")
	ErrUpstreamUnavailable = errors.New("upstream unavailable")
	ErrUpstreamTimeout     = errors.New("upstream timeout")
	ErrNotReady            = errors.New("not ready")
	ErrBadRequest          = errors.New("bad request")
	ErrForbidden           = errors.New("forbidden")
	// ErrMethodOverrideRefused refuses a request whose method override
	// header its route does not honour.
	ErrMethodOverrideRefused = errors.New("method override refused")
	ErrInvalidPayload        = errors.New("invalid payload")
	ErrQueueUnavailable      = errors.New("queue unavailable")
)

// problemTypes is the gateway's whole error contract: the middleware's
// refusals, then the gateway's own rows, so that every answer is decided
// by one table and its Retryable and Documentation follow one rule.
var problemTypes = append(idempotency.Refusals(), problem.Table{
	{Err: auth.ErrUnauthorized, Status: http.StatusUnauthorized, Slug: "unauthorized", Title: "Missing or invalid credentials"},
	{Err: ratelimit.ErrLimited, Status: http.StatusTooManyRequests, Slug: ratelimit.ProblemSlug, Title: "Rate limit exceeded"},
	{Err: ErrMethodOverrideRefused, Status: http.StatusBadRequest, Slug: "method-override-refused", Title: "Method override refused"},
	{Err: ErrForbidden, Status: http.StatusForbidden, Slug: "forbidden", Title: "Forbidden"},
	{Err: ErrNotFound, Status: http.StatusNotFound, Slug: "not-found", Title: "Not found"},
	{Err: ErrUpstreamUnavailable, Status: http.StatusBadGateway, Slug: "upstream-unavailable", Title: "Upstream unavailable"},
	{Err: ErrUpstreamTimeout, Status: http.StatusGatewayTimeout, Slug: "upstream-timeout", Title: "Upstream timed out"},
	{Err: ErrNotReady, Status: http.StatusServiceUnavailable, Slug: "not-ready", Title: "Not ready"},
	{Err: ErrBadRequest, Status: http.StatusBadRequest, Slug: "bad-request", Title: "Bad request"},
	{Err: ErrInvalidPayload, Status: http.StatusUnprocessableEntity, Slug: "invalid-payload", Title: "Invalid payload"},
	{Err: ErrQueueUnavailable, Status: http.StatusServiceUnavailable, Slug: "queue-unavailable", Title: "Queue unavailable"},
	{Err: ErrInvalidSchedule, Status: http.StatusBadRequest, Slug: "invalid-schedule", Title: "Invalid schedule"},
	{Err: job.ErrScheduleOutOfRange, Status: http.StatusUnprocessableEntity, Slug: "schedule-out-of-range", Title: "Schedule out of range"},
	{Err: ErrJobNotCancellable, Status: http.StatusConflict, Slug: "job-not-cancellable", Title: "Job not cancellable"},
	{Err: ErrBatchRefused, Status: http.StatusUnprocessableEntity, Slug: "batch-refused", Title: "Batch refused"},
	{Err: job.ErrScheduleQuota, Status: http.StatusUnprocessableEntity, Slug: "schedule-quota-exceeded", Title: "Schedule quota exceeded"},
}...)

// NewProblemWriter returns the writer of every error the gateway answers
// with: the table above, types under base, each document naming its
// request (request_id, and instance its urn:uuid:) and the key of the
// claim it runs under. A listener outside
// the gateway (the worker's admin listener) uses it to answer in the same
// form. logger receives the causes of 5xx answers; nil means
// slog.Default.
func NewProblemWriter(base string, logger *slog.Logger) problem.Writer {
	if logger == nil {
		logger = slog.Default()
	}
	return problem.Writer{
		Base:        base,
		Table:       problemTypes,
		Occurrence:  occurrence,
		Key:         idempotency.ProblemKey,
		Logger:      logger,
		Unexplained: "the gateway could not complete the request",
	}
}

// occurrence names a request by its X-Request-Id.
func occurrence(r *http.Request) (requestID, instance string) {
	id := requestid.FromContext(r.Context())
	return id, requestid.URN(id)
}
