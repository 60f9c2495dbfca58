package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/openapi"
	"github.com/idemgate/idemgate/problem"
)

// Fairness reads and sets the fairness pools (fairness: in the
// configuration) for GET and PUT /admin/fairness/{pool}. A *job.Fairness
// is one.
type Fairness interface {
	// Weights returns the pool's declaration and effective weights; ok
	// false for a pool not declared.
	Weights(ctx context.Context, pool string) (def job.FairPool, w job.FairWeights, ok bool, err error)
	// SetWeights replaces the pool's weights (job.ErrNoPool for a pool
	// not declared).
	SetWeights(ctx context.Context, pool string, w job.FairWeights) error
	// Backlog returns the pool's jobs by tenant and how many are in
	// flight.
	Backlog(ctx context.Context, pool string) ([]job.FairBacklog, int, error)
}

var _ Fairness = (*job.Fairness)(nil)

// maxFairnessBody bounds a PUT /admin/fairness/{pool} body.
const maxFairnessBody = 1 << 20

// handleFairnessGet answers a pool's weights and backlog. An unknown
// pool, or any pool when none is configured, is 404.
func (g *Gateway) handleFairnessGet() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		g.writeFairness(w, r, g.fairPool(r))
	}
}

// handleFairnessPut replaces a pool's weights and answers it as GET does.
func (g *Gateway) handleFairnessPut() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		pool := g.fairPool(r)
		if g.opts.Fairness == nil {
			g.writeFairness(w, r, pool) // 404
			return
		}
		if _, _, ok, _ := g.opts.Fairness.Weights(r.Context(), pool); !ok {
			g.writeFairness(w, r, pool)
			return
		}
		var body struct {
			DefaultWeight *float64           `json:"default_weight"`
			Weights       map[string]float64 `json:"weights"`
		}
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxFairnessBody))
		dec.DisallowUnknownFields()
		err := dec.Decode(&body)
		if err == nil && dec.Decode(new(json.RawMessage)) != io.EOF {
			err = errors.New("more than one JSON value")
		}
		if err == nil && body.DefaultWeight == nil {
			err = errors.New("default_weight is required")
		}
		var weights job.FairWeights
		if err == nil {
			weights = job.FairWeights{Default: *body.DefaultWeight, Weights: body.Weights}
			err = weights.Check()
		}
		if err != nil {
			g.problems.Write(w, r, &problem.Error{Err: ErrBadRequest,
				Detail: `the body must be {"default_weight": w, "weights": {"<tenant>": w}} with positive finite weights: ` + err.Error()})
			return
		}
		if err := g.opts.Fairness.SetWeights(r.Context(), pool, weights); err != nil {
			g.fairnessUnavailable(w, r, err)
			return
		}
		g.opts.Logger.InfoContext(r.Context(), "fairness weights set", "pool", pool, "default_weight", weights.Default, "weights", weights.Weights)
		g.writeFairness(w, r, pool)
	}
}

func (g *Gateway) fairPool(r *http.Request) string {
	pool, err := url.PathUnescape(chi.URLParam(r, "pool"))
	if err != nil {
		pool = chi.URLParam(r, "pool")
	}
	return pool
}

func (g *Gateway) fairnessUnavailable(w http.ResponseWriter, r *http.Request, err error) {
	g.problems.Write(w, r, &problem.Error{Err: ErrQueueUnavailable,
		Detail: "Redis, which holds the fairness pools with the queue, could not be read or written; retry", RetryAfter: time.Second, Cause: err})
}

// writeFairness answers the pool as GET shows it.
func (g *Gateway) writeFairness(w http.ResponseWriter, r *http.Request, pool string) {
	var (
		def     job.FairPool
		weights job.FairWeights
		ok      bool
		err     error
	)
	if g.opts.Fairness != nil {
		def, weights, ok, err = g.opts.Fairness.Weights(r.Context(), pool)
	}
	if !ok {
		g.problems.Write(w, r, &problem.Error{Err: ErrNotFound, Detail: "no fairness pool called " + strconv.Quote(pool) + " is declared under fairness"})
		return
	}
	var backlog []job.FairBacklog
	var inFlight int
	if err == nil {
		backlog, inFlight, err = g.opts.Fairness.Backlog(r.Context(), pool)
	}
	if err != nil {
		g.fairnessUnavailable(w, r, err)
		return
	}
	doc := openapi.FairnessState{Name: def.Name, Window: def.Window, DefaultWeight: weights.Default,
		Weights: weights.Weights, InFlight: inFlight, Tenants: []openapi.FairnessTenant{}}
	for _, b := range backlog {
		doc.Tenants = append(doc.Tenants, openapi.FairnessTenant{Tenant: b.Tenant, Weight: weights.Weight(b.Tenant),
			Ready: b.Ready, Delayed: b.Delayed, InFlight: b.InFlight})
	}
	writeJSON(w, http.StatusOK, doc)
}
