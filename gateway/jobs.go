package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/middleware/auth"
	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/openapi"
	"github.com/idemgate/idemgate/problem"
	"github.com/idemgate/idemgate/telemetry"
)

// Submitter is what the gateway needs to accept jobs and show them: a
// *job.Submitter is one. One that is also a Canceller serves the cancel
// endpoints.
type Submitter interface {
	Submit(ctx context.Context, req job.Request) (job.Row, error)
	Get(ctx context.Context, tenant, id string) (job.Row, error)
}

// EnqueueOptions makes a route an enqueue route.
type EnqueueOptions struct {
	// Spec is the declared job a request becomes. Required.
	Spec *job.Spec
	// Queue overrides the job's own queue when set.
	Queue string
	// Batch, when set, also serves the route's batch path.
	Batch *BatchOptions
}

// claimed returns the idempotency middleware's claim on r. Without one it
// answers r and returns false: with a key, the store failed open, and a
// job without a claim is not safe, so it refuses as if failing closed
// (notQueued says what did not happen); without a key, missing says what
// needs one.
func (g *Gateway) claimed(w http.ResponseWriter, r *http.Request, notQueued, missing string) (*idempotency.Attempt, bool) {
	a, ok := idempotency.AttemptFrom(r.Context())
	if ok {
		return a, true
	}
	if r.Header.Get(idempotency.HeaderKey) != "" {
		g.problems.Write(w, r, &problem.Error{Err: idempotency.ErrStoreUnavailable, Detail: "the idempotency store is unavailable; " + notQueued + ", retry with the same key", RetryAfter: time.Second})
		return a, false
	}
	g.problems.Write(w, r, &problem.Error{Err: idempotency.ErrKeyMissing, Detail: missing})
	return a, false
}

// handleEnqueue accepts a request as a job. It runs inside the idempotency
// middleware, so its 202 is the stored response every retry replays, with
// the same job id.
func (g *Gateway) handleEnqueue(route string, eo EnqueueOptions, timeout time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, ok := g.claimed(w, r, "the job was not queued", "enqueue routes need an Idempotency-Key")
		if !ok {
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			g.problems.Write(w, r, &problem.Error{Err: ErrBadRequest, Detail: "the request body could not be read", Cause: err})
			return
		}
		if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(strings.ToLower(ct), "application/json") {
			g.problems.Write(w, r, &problem.Error{Err: ErrBadRequest, Detail: "the body must be application/json"})
			return
		}
		sched, err := parseSchedule(r.Header)
		if err == nil {
			err = eo.Spec.CheckSchedule(sched, time.Now())
		}
		if err != nil {
			g.jobError(w, r, err)
			return
		}
		req := job.Request{Tenant: a.Scope.Tenant, Route: route, Key: a.Scope.Key, Spec: eo.Spec, Queue: eo.Queue, Body: body, Schedule: sched, MaxDepth: g.opts.MaxDepth}
		// Bounded like every commit of the route (commit_timeout): a
		// database or broker out of reach costs the client a 503 (or,
		// once the record is written, a 202 the relay makes good), not a
		// hang, and a synchronous standby's wait costs no 503.
		ctx, cancel := context.WithTimeout(r.Context(), timeout)
		defer cancel()
		ctx, span := telemetry.StartEnqueue(ctx, eo.Spec.Task, req.QueueName(), telemetry.Tenant(a.Scope.Tenant), telemetry.Route(route))
		j, err := g.opts.Jobs.Submit(ctx, req)
		span.SetAttributes(telemetry.JobID(j.ID))
		telemetry.End(span, err)
		if errors.Is(err, job.ErrTaskDeferred) {
			// The record is committed, so the job is accepted (GET
			// /v1/jobs/{id} shows it): the relay enqueues its task once
			// the queue answers again.
			g.opts.Logger.WarnContext(r.Context(), "job accepted, its task not enqueued yet (the relay will)",
				"job_id", j.ID, "task", j.Task, "queue", j.Queue, "err", err)
			err = nil
		}
		if err != nil {
			g.jobError(w, r, err)
			return
		}
		infoFrom(r.Context()).job = j.ID
		if j.NotBefore != nil {
			// A retry must replay this answer until the job has run, and
			// for the retention after, however far ahead it is scheduled.
			a.RetainAfter(*j.NotBefore)
		}
		writeResponse(w, jobAccepted(j))
	})
}

// jobAccepted is the 202 an enqueue route answers for job j, which every
// retry with its key replays: its Location, its ETag and the job
// document. A batch's items are answered, and stored, with the same one,
// so that a request sent alone with an item's key replays it.
func jobAccepted(j job.Row) idempotency.Response {
	doc := jobDocument(j)
	var body bytes.Buffer
	enc := json.NewEncoder(&body)
	enc.SetIndent("", "  ")
	_ = enc.Encode(doc) // strings, numbers and times: cannot fail
	return idempotency.Response{
		Status: http.StatusAccepted,
		Header: http.Header{
			"Content-Type": {"application/json"},
			"Location":     {"/v1/jobs/" + j.ID},
			"Etag":         {jobETag(doc)},
		},
		Body: body.Bytes(),
	}
}

// writeResponse writes resp to w.
func writeResponse(w http.ResponseWriter, resp idempotency.Response) {
	h := w.Header()
	for k, vs := range resp.Header {
		h[k] = vs
	}
	w.WriteHeader(resp.Status)
	_, _ = w.Write(resp.Body)
}

// jobDocument is how the enqueue routes and GET /v1/jobs/{id} show a job:
// the Job of openapi.yaml.
func jobDocument(j job.Row) openapi.Job {
	doc := openapi.Job{
		Id: j.ID, Task: j.Task, Status: openapi.JobStatus(j.Status), Attempts: j.Attempts,
		ResultRef: j.ResultRef, Error: j.Error, CreatedAt: j.CreatedAt, UpdatedAt: j.UpdatedAt,
		NotBefore: j.NotBefore, CancelRequestedAt: j.CancelRequestedAt, FinishedAt: j.FinishedAt,
	}
	if d := j.Debounce; d != nil {
		doc.Debounce = &openapi.JobDebounce{Key: d.Key, Coalesced: d.Coalesced, FirstAt: d.FirstAt, Until: d.Until}
	}
	return doc
}

func (g *Gateway) jobError(w http.ResponseWriter, r *http.Request, err error) {
	g.problems.Write(w, r, jobProblem(err))
}

// jobProblem is the refusal a job's error is answered with.
func jobProblem(err error) error {
	var pe *job.PayloadError
	switch {
	case errors.Is(err, ErrInvalidSchedule):
		return err
	case errors.Is(err, job.ErrScheduleOutOfRange):
		return &problem.Error{Err: err, Detail: err.Error()}
	case errors.As(err, &pe):
		kind := ErrInvalidPayload
		if errors.Is(err, job.ErrMalformed) {
			kind = ErrBadRequest
		}
		return &problem.Error{Err: kind, Detail: pe.Error(), Fields: pe.Faults()}
	case errors.Is(err, job.ErrNotFound):
		return &problem.Error{Err: ErrNotFound, Detail: "no such job"}
	}
	// No job was recorded (or none could be read): 503, which releases
	// the key.
	return &problem.Error{Err: ErrQueueUnavailable, Detail: "the job could not be queued; retry with the same Idempotency-Key", RetryAfter: time.Second, Cause: err}
}

// handleJobGet shows a job to the tenant that created it; another tenant
// gets 404, as if it did not exist. With ?wait= it holds until the job is
// final, or with If-None-Match until its document changes (wait.go).
func (g *Gateway) handleJobGet() http.Handler {
	return g.tenantChain(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		telemetry.SetEndpoint(r, "/v1/jobs/{id}")
		if g.opts.Jobs == nil {
			g.problems.Write(w, r, &problem.Error{Err: ErrNotFound, Detail: "this gateway has no enqueue routes"})
			return
		}
		id := chi.URLParam(r, "id")
		if !job.Storable(id) {
			g.problems.Write(w, r, &problem.Error{Err: ErrNotFound, Detail: "no such job"})
			return
		}
		jw, err := parseJobWait(r, g.opts.MaxWait)
		if err != nil {
			g.problems.Write(w, r, err)
			return
		}
		jw, release := g.admitWait(w, auth.Tenant(r.Context()), jw)
		defer release()
		watch := g.watchJob(r.Context(), id, jw)
		defer watch.Stop()
		rec, err := g.opts.Jobs.Get(r.Context(), auth.Tenant(r.Context()), id)
		if err != nil {
			g.jobError(w, r, err)
			return
		}
		g.writeJob(w, g.awaitJob(r, rec, jw, watch), jw)
	}))
}
