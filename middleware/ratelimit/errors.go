package ratelimit

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/idemgate/idemgate/problem"
)

// ErrLimited is the reason a request was refused: its tenant has used its
// budget for the current interval.
var ErrLimited = errors.New("rate limited")

// LimitedError is the cause of a refusal: the budget the tenant used up.
// The middleware passes Config.OnLimited a *problem.Error
// that wraps ErrLimited and holds it as its Cause, with the public Detail
// and RetryAfter, the time until the budget refills (in whole seconds and
// at least one: the value of the Retry-After header already set).
type LimitedError struct {
	Tenant string
	Limit  Limit
}

func (e *LimitedError) Error() string {
	return fmt.Sprintf("tenant %q used its %d requests per %s", e.Tenant, e.Limit.Tokens, e.Limit.Interval)
}

// limitedDetail is the detail of every refusal: the numbers are in the
// RateLimit-* headers.
const limitedDetail = "too many requests for this tenant; retry after the delay in Retry-After"

// ProblemSlug ends the problem type of a refusal (RFC 9457), after the
// application's problem base.
const ProblemSlug = "rate-limited"

const defaultProblemType = problem.DefaultBase + ProblemSlug

// DefaultOnLimited answers 429 with a minimal application/problem+json body
// of type https://idemgate.dev/problems/rate-limited. Applications usually
// supply their own OnLimited to add a request id and their problem base.
func DefaultOnLimited(w http.ResponseWriter, r *http.Request, err error) {
	body := map[string]any{
		"type":     defaultProblemType,
		"title":    "Too many requests",
		"status":   http.StatusTooManyRequests,
		"instance": r.URL.Path,
	}
	re, refused := errors.AsType[*problem.Error](err)
	if le, ok := errors.AsType[*LimitedError](err); ok && refused {
		body["detail"] = fmt.Sprintf("The rate limit of %d requests per %s is used up; retry in %d seconds.",
			le.Limit.Tokens, le.Limit.Interval, int64(re.RetryAfter/time.Second))
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(http.StatusTooManyRequests)
	_ = json.NewEncoder(w).Encode(body)
}
