package gateway

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/idemgate/idemgate/internal/explain"
	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/problem"
)

// Explainer tells the whole story of a job or an idempotency key: its
// record and claims, the job, every attempt and the effects, with a
// verdict (internal/explain.Explainer). The admin API serves the same
// document as `idemgate explain --json`.
type Explainer interface {
	Job(ctx context.Context, id string) (*explain.Story, error)
	Key(ctx context.Context, scope idempotency.Scope) (*explain.Story, error)
}

func (g *Gateway) handleKeyExplain() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		story, err := g.opts.Explainer.Key(r.Context(), scopeOf(r))
		g.writeStory(w, r, story, err)
	}
}

func (g *Gateway) handleJobExplain() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, err := url.PathUnescape(chi.URLParam(r, "id"))
		if err != nil || !job.Storable(id) {
			g.problems.Write(w, r, &problem.Error{Err: ErrNotFound, Detail: "no job with this id"})
			return
		}
		story, err := g.opts.Explainer.Job(r.Context(), id)
		g.writeStory(w, r, story, err)
	}
}

// writeStory answers 200 with the story, violation or not: the verdict
// and its violation flag are the answer. A job or key nobody knows is
// 404; a store that cannot be read is 503.
func (g *Gateway) writeStory(w http.ResponseWriter, r *http.Request, story *explain.Story, err error) {
	switch {
	case err == nil:
		writeJSON(w, http.StatusOK, story)
	case errors.Is(err, explain.ErrNotFound):
		g.problems.Write(w, r, &problem.Error{Err: ErrNotFound, Detail: err.Error()})
	default:
		g.problems.Write(w, r, &problem.Error{Err: idempotency.ErrStoreUnavailable, Detail: "the stores could not be read to tell the story; retry", RetryAfter: time.Second, Cause: err})
	}
}
