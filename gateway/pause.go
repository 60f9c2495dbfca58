package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/openapi"
	"github.com/idemgate/idemgate/problem"
)

// Pauses keeps the pauses of POST /admin/pause and /admin/resume and
// GET /admin/pauses: a *job.Pauses, with the names the configuration
// declares.
type Pauses interface {
	// Known returns nil for a target the configuration declares, else an
	// error saying what it does declare.
	Known(t job.PauseTarget) error
	Pause(ctx context.Context, p job.Pause) (job.Pause, error)
	Resume(ctx context.Context, t job.PauseTarget, ramp job.Ramp) (job.Pause, error)
	InForce(ctx context.Context) ([]job.Pause, error)
}

// maxPauseBody bounds a POST /admin/pause or /admin/resume body.
const maxPauseBody = 16 << 10

// pauseBody is the body of both: PauseRequest and ResumeRequest of
// openapi.yaml.
type pauseBody struct {
	Task  *string `json:"task"`
	Queue *string `json:"queue"`
	Limit *struct {
		Name string `json:"name"`
		Key  string `json:"key"`
	} `json:"limit"`
	Until  *string `json:"until"`
	Ramp   *string `json:"ramp"`
	Reason string  `json:"reason"`
}

// target is the one target the body names.
func (b pauseBody) target() (job.PauseTarget, error) {
	var out []job.PauseTarget
	if b.Task != nil {
		out = append(out, job.PauseTarget{Kind: job.PauseTask, Name: *b.Task})
	}
	if b.Queue != nil {
		out = append(out, job.PauseTarget{Kind: job.PauseQueue, Name: *b.Queue})
	}
	if b.Limit != nil {
		out = append(out, job.PauseTarget{Kind: job.PauseLimit, Name: b.Limit.Name, Key: b.Limit.Key})
	}
	if len(out) != 1 {
		return job.PauseTarget{}, errors.New(`name exactly one target: {"task": "…"}, {"queue": "…"} or {"limit": {"name": "…", "key": "…"}}`)
	}
	return out[0], out[0].Check()
}

// readPauseBody reads the body of a pause (resume false) or a resume.
func (g *Gateway) readPauseBody(w http.ResponseWriter, r *http.Request, resume bool) (pauseBody, job.PauseTarget, error) {
	var b pauseBody
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxPauseBody))
	dec.DisallowUnknownFields()
	err := dec.Decode(&b)
	if err == nil && dec.Decode(new(json.RawMessage)) != io.EOF {
		err = errors.New("more than one JSON value")
	}
	var t job.PauseTarget
	switch {
	case err != nil:
	case resume && b.Until != nil:
		err = errors.New("until is for a pause; a resume takes ramp")
	case !resume && b.Ramp != nil:
		err = errors.New("ramp is for a resume; a pause takes until")
	default:
		t, err = b.target()
	}
	if err == nil {
		err = job.CheckReason(b.Reason)
	}
	if err != nil {
		return b, t, &problem.Error{Err: ErrBadRequest, Detail: "the body of " + r.URL.Path + ": " + err.Error()}
	}
	if err := g.opts.Pauses.Known(t); err != nil {
		return b, t, &problem.Error{Err: ErrNotFound, Detail: err.Error()}
	}
	return b, t, nil
}

// handlePause pauses a task, a queue or a limit key value.
func (g *Gateway) handlePause() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if g.noPauses(w, r) {
			return
		}
		b, t, err := g.readPauseBody(w, r, false)
		if err != nil {
			g.problems.Write(w, r, err)
			return
		}
		p := job.Pause{Target: t, By: Operator(r), Reason: b.Reason}
		if b.Until != nil {
			if p.Until, err = job.ParseUntil(*b.Until, time.Now()); err != nil {
				g.problems.Write(w, r, &problem.Error{Err: ErrBadRequest, Detail: err.Error()})
				return
			}
		}
		if p, err = g.opts.Pauses.Pause(r.Context(), p); err != nil {
			g.problems.Write(w, r, err)
			return
		}
		_, _ = g.audit.Record(r.Context(), r, job.Action{Action: "pause", Via: "api", Filter: t.String(), Reason: b.Reason})
		writeJSON(w, http.StatusOK, PauseDocument(p))
	}
}

// handleResume ends a pause, at once or along a ramp.
func (g *Gateway) handleResume() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if g.noPauses(w, r) {
			return
		}
		b, t, err := g.readPauseBody(w, r, true)
		if err != nil {
			g.problems.Write(w, r, err)
			return
		}
		var ramp job.Ramp
		if b.Ramp != nil {
			if ramp, err = job.ParseRamp(*b.Ramp); err != nil {
				g.problems.Write(w, r, &problem.Error{Err: ErrBadRequest, Detail: err.Error()})
				return
			}
		}
		p, err := g.opts.Pauses.Resume(r.Context(), t, ramp)
		switch {
		case errors.Is(err, job.ErrNotPaused):
			g.problems.Write(w, r, &problem.Error{Err: ErrNotFound, Detail: "the " + t.String() + " is not paused"})
			return
		case err != nil:
			g.problems.Write(w, r, err)
			return
		}
		_, _ = g.audit.Record(r.Context(), r, job.Action{Action: "resume", Via: "api", Filter: t.String(), Reason: b.Reason})
		writeJSON(w, http.StatusOK, PauseDocument(p))
	}
}

// handlePauseList lists the pauses in force.
func (g *Gateway) handlePauseList() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if g.noPauses(w, r) {
			return
		}
		list, err := g.opts.Pauses.InForce(r.Context())
		if err != nil {
			g.problems.Write(w, r, err)
			return
		}
		doc := openapi.PauseList{Pauses: []openapi.Pause{}}
		for _, p := range list {
			doc.Pauses = append(doc.Pauses, PauseDocument(p))
		}
		writeJSON(w, http.StatusOK, doc)
	}
}

// noPauses answers 404 when the gateway keeps no pauses (no database).
func (g *Gateway) noPauses(w http.ResponseWriter, r *http.Request) bool {
	if g.opts.Pauses != nil {
		return false
	}
	g.problems.Write(w, r, &problem.Error{Err: ErrNotFound, Detail: "pauses are kept in PostgreSQL: set database_url"})
	return true
}

// PauseDocument is the Pause of openapi.yaml.
func PauseDocument(p job.Pause) openapi.Pause {
	doc := openapi.Pause{Since: p.Since.UTC(), By: p.By, Reason: p.Reason, Story: p.Story()}
	switch name := p.Target.Name; p.Target.Kind {
	case job.PauseTask:
		doc.Target.Task = &name
	case job.PauseQueue:
		doc.Target.Queue = &name
	case job.PauseLimit:
		key := p.Target.Key
		doc.Target.Limit = &struct {
			Name string  `json:"name"`
			Key  *string `json:"key,omitempty"`
		}{Name: name, Key: &key}
	}
	if !p.Until.IsZero() {
		u := p.Until.UTC()
		doc.Until = &u
	}
	if !p.Resumed.IsZero() {
		u := p.Resumed.UTC()
		doc.ResumedAt = &u
	}
	if s := p.Ramp.String(); s != "" && !p.Resumed.IsZero() {
		doc.Ramp = &s
	}
	return doc
}
