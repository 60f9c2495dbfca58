package ratelimit

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// ErrLimited is the reason a request was refused: its tenant has used its
// budget for the current interval.
var ErrLimited = errors.New("rate limited")

// LimitedError is what the middleware passes to Config.OnLimited. It wraps
// ErrLimited.
type LimitedError struct {
	Tenant string
	Limit  Limit
	// RetryAfter is the time until the budget refills, in whole seconds and
	// at least one: the value of the Retry-After header already set.
	RetryAfter time.Duration
}

func (e *LimitedError) Error() string {
	return fmt.Sprintf("%v: tenant %q used its %d requests per %s; retry after %s",
		ErrLimited, e.Tenant, e.Limit.Tokens, e.Limit.Interval, e.RetryAfter)
}

func (e *LimitedError) Unwrap() error { return ErrLimited }

// ProblemSlug ends the problem type of a refusal (RFC 9457), after the
// application's problem base.
const ProblemSlug = "rate-limited"

const defaultProblemType = "https://idemgate.dev/problems/" + ProblemSlug

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
	if le, ok := errors.AsType[*LimitedError](err); ok {
		body["detail"] = fmt.Sprintf("The rate limit of %d requests per %s is used up; retry in %d seconds.",
			le.Limit.Tokens, le.Limit.Interval, int64(le.RetryAfter/time.Second))
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(http.StatusTooManyRequests)
	_ = json.NewEncoder(w).Encode(body)
}
