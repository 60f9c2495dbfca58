package gateway

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/openapi"
	"github.com/idemgate/idemgate/problem"
)

// Limits reads the flow limits the workers enforce (limits: in the
// configuration) for GET /admin/limits/{name}.
type Limits interface {
	// Limit returns the declared limit called name.
	Limit(name string) (job.FlowLimit, bool)
	// Busiest returns up to n of the limit's recently used key values,
	// busiest first, as Redis holds them now.
	Busiest(ctx context.Context, name string, n int) ([]LimitUsage, error)
}

// LimitUsage is one key value of a limit now.
type LimitUsage struct {
	Value string
	// Holders hold a slot whose lease has not run out.
	Holders []string
	// Backlog is how far the rate's schedule runs ahead of now.
	Backlog time.Duration
	// LastUsed is the last take of the value.
	LastUsed time.Time
}

// Bounds of ?top= on GET /admin/limits/{name}.
const (
	defaultLimitTop = 20
	maxLimitTop     = 1000
)

// handleLimitGet answers a limit's definition and its busiest key values.
// An unknown limit, or any limit when none is configured, is 404.
func (g *Gateway) handleLimitGet() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name, err := url.PathUnescape(chi.URLParam(r, "name"))
		if err != nil {
			name = chi.URLParam(r, "name")
		}
		var def job.FlowLimit
		ok := false
		if g.opts.Limits != nil {
			def, ok = g.opts.Limits.Limit(name)
		}
		if !ok {
			g.problems.Write(w, r, &problem.Error{Err: ErrNotFound, Detail: "no limit called " + strconv.Quote(name) + " is declared under limits"})
			return
		}
		top := defaultLimitTop
		if s := r.URL.Query().Get("top"); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 || n > maxLimitTop {
				g.problems.Write(w, r, &problem.Error{Err: ErrBadRequest,
					Detail: "top must be a whole number from 1 to " + strconv.Itoa(maxLimitTop)})
				return
			}
			top = n
		}
		usage, err := g.opts.Limits.Busiest(r.Context(), name, top)
		if err != nil {
			g.problems.Write(w, r, &problem.Error{Err: ErrQueueUnavailable,
				Detail: "Redis, which holds the limits' counters with the queue, could not be read; retry", RetryAfter: time.Second, Cause: err})
			return
		}
		doc := limitDocument(def, usage)
		if g.opts.Pauses != nil {
			pauses, err := g.opts.Pauses.InForce(r.Context())
			if err != nil {
				g.problems.Write(w, r, err)
				return
			}
			doc.Paused = &[]openapi.Pause{}
			for _, p := range pauses {
				if p.Target.Kind == job.PauseLimit && p.Target.Name == name {
					*doc.Paused = append(*doc.Paused, PauseDocument(p))
				}
			}
		}
		writeJSON(w, http.StatusOK, doc)
	}
}

// limitDocument is the LimitState of openapi.yaml.
func limitDocument(def job.FlowLimit, usage []LimitUsage) openapi.LimitState {
	doc := openapi.LimitState{Name: def.Name, Values: []openapi.LimitValue{}}
	if def.Concurrency > 0 {
		doc.Concurrency = &def.Concurrency
	}
	interval := def.Interval()
	if interval > 0 {
		rate := def.RateString()
		doc.Rate = &rate
		doc.Burst = &def.Burst
	}
	if b := def.PauseAfter; b != nil {
		doc.PauseAfter = &openapi.LimitBreaker{ConsecutiveFailures: b.Failures, Within: b.Within.String(), For: b.For.String()}
	}
	for _, u := range usage {
		v := openapi.LimitValue{Value: u.Value, Held: len(u.Holders), Holders: u.Holders, LastUsedAt: u.LastUsed.UTC()}
		if v.Holders == nil {
			v.Holders = []string{}
		}
		if interval > 0 {
			// A start is admitted once the backlog is within the burst's
			// allowance, (burst-1) intervals.
			wait := max(u.Backlog-time.Duration(def.Burst-1)*interval, 0)
			ahead, waitMs := int(u.Backlog/interval), wait.Milliseconds()
			v.StartsAhead, v.NextStartInMs = &ahead, &waitMs
		}
		doc.Values = append(doc.Values, v)
	}
	return doc
}
