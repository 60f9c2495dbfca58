package gateway

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"mime"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/problem"
)

// ActionRecorder keeps the audit trail of operators' actions in
// PostgreSQL (a *job.Store is one).
type ActionRecorder interface {
	RecordAction(ctx context.Context, a job.Action, targets []job.Action) (job.Action, error)
}

// TokenActor is who an action was taken by when the admin request
// carried a bearer token, or HTTP Basic credentials with no user name:
// there is one admin token, and it names no one.
const TokenActor = "admin token"

// Operator is who sent the admin request r: the user name of its HTTP
// Basic credentials (the console's login; the password is the admin
// token, the name is what the operator typed), else TokenActor.
func Operator(r *http.Request) string {
	if user, _, ok := r.BasicAuth(); ok && user != "" {
		return user
	}
	return TokenActor
}

// Audit records what operators do through the admin API and the console:
// each action is a row per target in admin_actions (when the gateway has
// PostgreSQL), a log line "operator action" with who, what, the targets
// and the reason, and a count in idemgate_admin_actions_total{action}.
type Audit struct {
	store   ActionRecorder // nil: no database, the log line and the count only
	logger  *slog.Logger
	actions *prometheus.CounterVec
}

// newAdminActions is the series of the actions operators took.
func newAdminActions() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "idemgate_admin_actions_total",
		Help: "Actions operators took through the admin API or the console, by action (cancel, replay, delete, requeue, delete-key, resolve-key, …); a bulk action counts once.",
	}, []string{"action"})
}

// Audit is the gateway's audit trail; the console records into it.
func (g *Gateway) Audit() *Audit { return g.audit }

// Record keeps a, taken by Operator(r), on targets (each names a job or a
// key; none: a itself names its target). It fills in a's actor and
// returns a as recorded. A failure to write the row is logged and
// returned; the action has already happened by then, so callers report
// it and do not undo it.
func (a *Audit) Record(ctx context.Context, r *http.Request, act job.Action, targets ...job.Action) (job.Action, error) {
	act.Actor = Operator(r)
	a.actions.WithLabelValues(act.Action).Inc()
	ids := make([]string, 0, len(targets))
	for _, t := range targets {
		if t.JobID != "" {
			ids = append(ids, t.JobID)
		}
	}
	args := []any{"actor", act.Actor, "action", act.Action, "via", act.Via, "reason", act.Reason}
	switch {
	case act.JobID != "":
		args = append(args, "job_id", act.JobID, "tenant", act.Tenant)
	case act.Key != "":
		args = append(args, "tenant", act.Tenant, "route", act.Route, "idempotency_key", act.Key)
	}
	if len(targets) > 0 {
		args = append(args, "job_ids", ids, "targets", len(targets))
	}
	if act.Filter != "" {
		args = append(args, "filter", act.Filter)
	}
	var err error
	if a.store != nil {
		var rec job.Action
		if rec, err = a.store.RecordAction(ctx, act, targets); err == nil {
			act = rec
			args = append(args, "action_id", act.ID)
		}
	}
	a.logger.InfoContext(ctx, "operator action", args...)
	if err != nil {
		a.logger.ErrorContext(ctx, "operator action not recorded in admin_actions", "action", act.Action, "err", err)
	}
	return act, err
}

// maxActionBody bounds the JSON body an admin action reads its reason from.
const maxActionBody = 16 << 10

// actionReason reads the reason of an admin API action: the query's
// reason, or the reason of a JSON body ({"reason": "…"}). A bad body or
// a reason too long is a *problem.Error (400).
func actionReason(r *http.Request) (string, error) {
	reason := r.URL.Query().Get("reason")
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt == "application/json" {
		var body struct {
			Reason string `json:"reason"`
		}
		dec := json.NewDecoder(io.LimitReader(r.Body, maxActionBody))
		if err := dec.Decode(&body); err != nil && err != io.EOF {
			return "", &problem.Error{Err: ErrBadRequest, Detail: "the body of an admin action is a JSON object such as {\"reason\": \"…\"}"}
		}
		if body.Reason != "" {
			reason = body.Reason
		}
	}
	if job.CheckReason(reason) != nil {
		return "", &problem.Error{Err: ErrBadRequest, Detail: "reason is at most 1000 bytes of UTF-8"}
	}
	return reason, nil
}
