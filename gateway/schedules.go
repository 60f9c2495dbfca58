package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/middleware/auth"
	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/openapi"
	"github.com/idemgate/idemgate/problem"
	"github.com/idemgate/idemgate/telemetry"
)

// ScheduleOptions serves the recurring schedules' endpoints
// (/v1/schedules…, /admin/schedules/{id}/backfill).
type ScheduleOptions struct {
	// Store keeps the schedules. Required.
	Store *job.Schedules
	// Jobs fires a trigger and a backfill. Required.
	Jobs *job.Submitter
	// Specs are the declared jobs, by task: a schedule's task must be one.
	Specs map[string]*job.Spec
	// MaxPerTenant is the most schedules a tenant may create; 0: no
	// bound.
	MaxPerTenant int
	// MinInterval is the shortest time apart a schedule's slots may be.
	MinInterval time.Duration
	// Now is the clock of a new schedule's first slot. Default time.Now.
	Now func() time.Time
}

// maxScheduleBody bounds a PUT /v1/schedules/{id} and a backfill body.
const maxScheduleBody = 1 << 20

// NextFireTimes is how many upcoming slots a schedule's document and
// its console page show.
const NextFireTimes = 5

func (o *ScheduleOptions) now() time.Time {
	if o.Now != nil {
		return o.Now()
	}
	return time.Now()
}

// scheduleRoutes adds the tenant's schedule endpoints to r.
func (g *Gateway) scheduleRoutes(r chi.Router) {
	r.Method(http.MethodGet, "/v1/schedules", g.handleScheduleList())
	r.Method(http.MethodPut, "/v1/schedules/{id}", g.handleSchedulePut())
	r.Method(http.MethodGet, "/v1/schedules/{id}", g.handleScheduleGet())
	r.Method(http.MethodDelete, "/v1/schedules/{id}", g.handleScheduleDelete())
	r.Method(http.MethodPost, "/v1/schedules/{id}/pause", g.handleSchedulePause(true))
	r.Method(http.MethodPost, "/v1/schedules/{id}/resume", g.handleSchedulePause(false))
	r.Method(http.MethodPost, "/v1/schedules/{id}/trigger", g.handleScheduleTrigger())
}

// scheduleHandler is a tenant's schedules endpoint: it names the endpoint
// for telemetry, and answers 404 when the gateway serves no schedules.
func (g *Gateway) scheduleHandler(endpoint string, serve func(w http.ResponseWriter, r *http.Request, o *ScheduleOptions)) http.Handler {
	return g.tenantChain(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		telemetry.SetEndpoint(r, endpoint)
		if o := g.schedules(w, r); o != nil {
			serve(w, r, o)
		}
	}))
}

// schedules answers 404 and returns nil when the gateway serves no
// schedules.
func (g *Gateway) schedules(w http.ResponseWriter, r *http.Request) *ScheduleOptions {
	if g.opts.Schedules == nil {
		g.problems.Write(w, r, &problem.Error{Err: ErrNotFound, Detail: "this gateway serves no schedules: it has no database or no route that enqueues jobs"})
	}
	return g.opts.Schedules
}

func (g *Gateway) scheduleError(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, job.ErrNotFound):
		err = &problem.Error{Err: ErrNotFound, Detail: "no such schedule"}
	case errors.Is(err, job.ErrScheduleQuota):
		err = &problem.Error{Err: job.ErrScheduleQuota,
			Detail: fmt.Sprintf("the tenant has %d schedules, the most it may (jobs_api.schedules.max_per_tenant); delete one first", g.opts.Schedules.MaxPerTenant)}
	case errors.Is(err, job.ErrBackfillTooLong):
		err = &problem.Error{Err: ErrBadRequest, Detail: err.Error()}
	}
	g.problems.Write(w, r, err)
}

// handleSchedulePut is PUT /v1/schedules/{id}: 201 when it created the
// schedule, 200 when it replaced it. A PUT converges: it needs no key.
func (g *Gateway) handleSchedulePut() http.Handler {
	return g.scheduleHandler("/v1/schedules/{id}", func(w http.ResponseWriter, r *http.Request, o *ScheduleOptions) {
		tenant, id := auth.Tenant(r.Context()), PathParam(r, "id")
		var decl struct {
			Task          string          `json:"task"`
			Cron          string          `json:"cron"`
			Every         string          `json:"every"`
			Timezone      string          `json:"timezone"`
			Body          json.RawMessage `json:"body"`
			Overlap       job.Overlap     `json:"overlap"`
			Catchup       job.Catchup     `json:"catchup"`
			CatchupWindow string          `json:"catchup_window"`
			Jitter        string          `json:"jitter"`
		}
		if err := decodeScheduleBody(w, r, &decl); err != nil {
			g.problems.Write(w, r, err)
			return
		}
		var faults []job.FieldError
		if !validScheduleID(id) {
			faults = append(faults, job.FieldError{Field: "id", Message: fmt.Sprintf("%q may only contain a-z, 0-9, '_', '.', ':' and '-', at most 200", id)})
		}
		duration := func(field, v string) time.Duration {
			if v == "" {
				return 0
			}
			d, err := time.ParseDuration(v)
			if err != nil {
				faults = append(faults, job.FieldError{Field: field, Message: fmt.Sprintf("%q is not a duration like 90s or 15m", v)})
			}
			return d
		}
		every := duration("every", decl.Every)
		rec := job.Recurring{Tenant: tenant, ID: id, Task: decl.Task, Body: decl.Body, Overlap: decl.Overlap, Catchup: decl.Catchup,
			CatchupWindow: duration("catchup_window", decl.CatchupWindow), Jitter: duration("jitter", decl.Jitter), Source: job.SourceAPI}
		if bytes.Equal(bytes.TrimSpace(rec.Body), []byte("null")) {
			rec.Body = nil
		}
		spec := o.Specs[decl.Task]
		tm, more := job.CheckDeclaration(decl.Cron, every, decl.Timezone, rec, spec, o.MinInterval, o.now())
		faults = append(faults, more...)
		if len(faults) > 0 {
			g.problems.Write(w, r, &problem.Error{Err: ErrInvalidPayload, Detail: "the schedule is invalid: " + faultList(faults), Fields: faultFields(faults)})
			return
		}
		rec.Timing = tm
		got, created, err := o.Store.Put(r.Context(), rec, o.now(), o.MaxPerTenant)
		if err != nil {
			g.scheduleError(w, r, err)
			return
		}
		status := http.StatusOK
		if created {
			status = http.StatusCreated
			w.Header().Set("Location", "/v1/schedules/"+url.PathEscape(id))
		}
		g.writeSchedule(w, r, status, got)
	})
}

func validScheduleID(id string) bool {
	if id == "" || len(id) > 200 {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == ':' || c == '-') {
			return false
		}
	}
	return true
}

func faultList(faults []job.FieldError) string {
	var b bytes.Buffer
	for i, f := range faults {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(f.Field + ": " + f.Message)
	}
	return b.String()
}

func faultFields(faults []job.FieldError) []problem.FieldFault {
	out := make([]problem.FieldFault, len(faults))
	for i, f := range faults {
		out[i] = problem.FieldFault{Field: f.Field, Message: f.Message}
	}
	return out
}

// decodeScheduleBody reads r's JSON body, one value of at most maxScheduleBody
// bytes, into v; an error is the 400 to answer.
func decodeScheduleBody(w http.ResponseWriter, r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxScheduleBody))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil && dec.Decode(new(json.RawMessage)) != io.EOF {
		err = errors.New("more than one JSON value")
	}
	if err != nil {
		return &problem.Error{Err: ErrBadRequest, Detail: "the body is not the JSON object expected: " + err.Error()}
	}
	return nil
}

func (g *Gateway) handleScheduleGet() http.Handler {
	return g.scheduleHandler("/v1/schedules/{id}", func(w http.ResponseWriter, r *http.Request, o *ScheduleOptions) {
		rec, err := o.Store.Get(r.Context(), auth.Tenant(r.Context()), PathParam(r, "id"))
		if err != nil {
			g.scheduleError(w, r, err)
			return
		}
		g.writeSchedule(w, r, http.StatusOK, rec)
	})
}

func (g *Gateway) handleScheduleList() http.Handler {
	return g.scheduleHandler("/v1/schedules", func(w http.ResponseWriter, r *http.Request, o *ScheduleOptions) {
		recs, err := o.Store.List(r.Context(), auth.Tenant(r.Context()))
		if err != nil {
			g.scheduleError(w, r, err)
			return
		}
		list := openapi.ScheduleList{Schedules: []openapi.Schedule{}}
		for _, rec := range recs {
			list.Schedules = append(list.Schedules, scheduleDocument(rec, nil, o.now()))
		}
		w.Header().Set("Cache-Control", "no-store")
		writeJSON(w, http.StatusOK, list)
	})
}

func (g *Gateway) handleScheduleDelete() http.Handler {
	return g.scheduleHandler("/v1/schedules/{id}", func(w http.ResponseWriter, r *http.Request, o *ScheduleOptions) {
		if err := o.Store.Delete(r.Context(), auth.Tenant(r.Context()), PathParam(r, "id")); err != nil {
			g.scheduleError(w, r, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}

func (g *Gateway) handleSchedulePause(paused bool) http.Handler {
	endpoint := "/v1/schedules/{id}/resume"
	if paused {
		endpoint = "/v1/schedules/{id}/pause"
	}
	return g.scheduleHandler(endpoint, func(w http.ResponseWriter, r *http.Request, o *ScheduleOptions) {
		rec, err := o.Store.SetPaused(r.Context(), auth.Tenant(r.Context()), PathParam(r, "id"), paused)
		if err != nil {
			g.scheduleError(w, r, err)
			return
		}
		g.writeSchedule(w, r, http.StatusOK, rec)
	})
}

// handleScheduleTrigger is POST /v1/schedules/{id}/trigger: one job now,
// its id derived from the Idempotency-Key, which is required.
func (g *Gateway) handleScheduleTrigger() http.Handler {
	return g.scheduleHandler("/v1/schedules/{id}/trigger", func(w http.ResponseWriter, r *http.Request, o *ScheduleOptions) {
		key, err := idempotency.ParseKey(r.Header.Values(idempotency.HeaderKey), idempotency.KeyCompat, idempotency.DefaultMaxKeyLength)
		if errors.Is(err, idempotency.ErrKeyMissing) {
			err = &problem.Error{Err: err, Detail: "a trigger needs an Idempotency-Key: the same key fires once"}
		}
		if err != nil {
			g.problems.Write(w, r, err)
			return
		}
		rec, err := o.Jobs.Trigger(r.Context(), o.Specs, auth.Tenant(r.Context()), PathParam(r, "id"), key)
		if err != nil && !errors.Is(err, job.ErrTaskDeferred) {
			if errors.Is(err, job.ErrNotFound) {
				g.scheduleError(w, r, err)
				return
			}
			g.jobError(w, r, err)
			return
		}
		infoFrom(r.Context()).job = rec.ID
		w.Header().Set("Location", "/v1/jobs/"+rec.ID)
		writeJSON(w, http.StatusAccepted, jobDocument(rec))
	})
}

// handleScheduleBackfill is POST /admin/schedules/{id}/backfill.
func (g *Gateway) handleScheduleBackfill() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		o := g.schedules(w, r)
		if o == nil {
			return
		}
		var req openapi.BackfillRequest
		if err := decodeScheduleBody(w, r, &req); err != nil {
			g.problems.Write(w, r, err)
			return
		}
		if req.From.IsZero() || req.To.IsZero() || req.To.Before(req.From) {
			g.problems.Write(w, r, &problem.Error{Err: ErrBadRequest, Detail: "from and to are required, RFC 3339 times, from not after to"})
			return
		}
		tenant := ""
		if req.Tenant != nil {
			tenant = *req.Tenant
		}
		recs, err := o.Jobs.Backfill(r.Context(), o.Specs, tenant, PathParam(r, "id"), req.From, req.To)
		if err != nil && !errors.Is(err, job.ErrTaskDeferred) {
			g.scheduleError(w, r, err)
			return
		}
		out := openapi.BackfillResult{ScheduleId: PathParam(r, "id"), Tenant: tenant, Fires: []openapi.ScheduleFire{}}
		for _, rec := range recs {
			out.Tenant = rec.Tenant
			slot, _ := time.Parse(time.RFC3339, rec.IdempotencyKey)
			out.Fires = append(out.Fires, openapi.ScheduleFire{Slot: slot, JobId: rec.ID, Status: openapi.JobStatus(rec.Status)})
		}
		_, _ = g.audit.Record(r.Context(), r, job.Action{Action: "schedule backfill", Via: "api", Tenant: out.Tenant,
			Reason: fmt.Sprintf("schedule %s from %s to %s: %d slots", out.ScheduleId, req.From.Format(time.RFC3339), req.To.Format(time.RFC3339), len(recs))})
		writeJSON(w, http.StatusOK, out)
	}
}

// writeSchedule answers with rec's document, its last fire read.
func (g *Gateway) writeSchedule(w http.ResponseWriter, r *http.Request, status int, rec job.Recurring) {
	o := g.opts.Schedules
	last, ok, err := o.Store.LastFire(r.Context(), rec.Tenant, rec.ID)
	if err != nil {
		g.scheduleError(w, r, err)
		return
	}
	var fire *openapi.ScheduleFire
	if ok {
		fire = &openapi.ScheduleFire{Slot: last.Slot, JobId: last.JobID, Status: openapi.JobStatus(last.Status)}
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, status, scheduleDocument(rec, fire, o.now()))
}

// scheduleDocument is rec as the API shows it.
func scheduleDocument(rec job.Recurring, last *openapi.ScheduleFire, now time.Time) openapi.Schedule {
	doc := openapi.Schedule{
		Id: rec.ID, Task: rec.Task, Timezone: rec.Timing.Zone.String(), Body: rec.Body,
		Overlap: openapi.ScheduleOverlap(rec.Overlap), Catchup: openapi.ScheduleCatchup(rec.Catchup),
		Paused: rec.Paused, NextFireAt: rec.NextFireAt, Source: openapi.ScheduleSource(rec.Source),
		CreatedAt: rec.CreatedAt, UpdatedAt: rec.UpdatedAt, LastFire: last,
	}
	if rec.Timing.Every != 0 {
		doc.Every = new(rec.Timing.Every.String())
	} else {
		doc.Cron = new(rec.Timing.Cron)
	}
	if rec.CatchupWindow > 0 {
		doc.CatchupWindow = new(rec.CatchupWindow.String())
	}
	if rec.Jitter > 0 {
		doc.Jitter = new(rec.Jitter.String())
	}
	doc.NextFireTimes = rec.Upcoming(now, NextFireTimes)
	return doc
}
