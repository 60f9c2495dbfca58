package explain

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/openapi"
	"github.com/idemgate/idemgate/workers/execution"
)

// ErrNotFound: neither a job nor an idempotency record by that name.
// Errors that match it say which.
var ErrNotFound = errors.New("explain: no such job or key")

type notFoundError struct{ msg string }

func (e *notFoundError) Error() string        { return e.msg }
func (e *notFoundError) Is(target error) bool { return target == ErrNotFound }

// DefaultStuckAfter is Explainer.StuckAfter's default, reconcile's
// --stuck-after.
const DefaultStuckAfter = 15 * time.Minute

// KeyReader reads idempotency records; every idempotency.Store does.
type KeyReader interface {
	Get(ctx context.Context, scope idempotency.Scope) (idempotency.Record, error)
}

// Explainer builds stories. DB is required; every other source is
// optional.
type Explainer struct {
	// DB holds jobs, job_executions and job_attempts (a *pgxpool.Pool);
	// nil when there is no database (a gateway on store memory without
	// database_url): a key's story then has no job, and Job finds none.
	DB job.DB
	// Keys is the idempotency store; nil leaves the record out.
	Keys KeyReader
	// Claims reads a record's claim ledger; nil when the store keeps none,
	// and NoClaims says why.
	Claims   func(ctx context.Context, scope idempotency.Scope) ([]openapi.StoryClaim, error)
	NoClaims string
	// Effects returns the effects that carry a business key of task, and
	// whether it knows the task's effects at all. A task it does not know
	// (an HTTP delivery) shows the receiver's recorded answer instead.
	Effects func(ctx context.Context, task, tenant, businessKey string) ([]openapi.StoryEffect, bool, error)
	// Delivered reports whether task is delivered over HTTP (a job
	// declaration's deliver.http): its effect lives in the receiver's
	// database, so an attempt that got no answer may have applied it. Nil:
	// no task is.
	Delivered func(task string) bool
	// TaskState says where the queue holds a job's task ("" when it has
	// none); nil leaves it out.
	TaskState func(ctx context.Context, queue, id string) (string, error)
	// StuckAfter is how long an unfinished job may stay unchanged before it
	// is stuck (a violation). Default DefaultStuckAfter.
	StuckAfter time.Duration
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// Job tells the story of the job with id.
func (x *Explainer) Job(ctx context.Context, id string) (*Story, error) {
	if x.DB == nil {
		return nil, &notFoundError{"no job " + id + ": jobs are kept in PostgreSQL and this process has no database_url"}
	}
	j, err := job.NewStore(x.DB).ByID(ctx, id)
	switch {
	case errors.Is(err, job.ErrNotFound):
		return nil, &notFoundError{"no job " + id}
	case err != nil:
		return nil, err
	}
	s := &Story{}
	if err := x.addRecord(ctx, s, idempotency.Scope{Tenant: j.Tenant, Route: j.Route, Key: j.IdempotencyKey}); err != nil {
		return nil, err
	}
	effectsKnown, err := x.addJob(ctx, s, j)
	if err != nil {
		return nil, err
	}
	if err := x.addCallbacks(ctx, s, j.ID); err != nil {
		return nil, err
	}
	if err := x.addActions(ctx, s, j.ID, idempotency.Scope{}); err != nil {
		return nil, err
	}
	x.judge(s, effectsKnown)
	return s, nil
}

// Key tells the story of the idempotency key scope: its record, its claims
// and, for an enqueue route, its job.
func (x *Explainer) Key(ctx context.Context, scope idempotency.Scope) (*Story, error) {
	s := &Story{}
	if err := x.addRecord(ctx, s, scope); err != nil {
		return nil, err
	}
	var j job.Row
	effectsKnown := false
	err := job.ErrNotFound
	if x.DB != nil {
		j, err = job.NewStore(x.DB).Get(ctx, scope.Tenant, job.ID(scope.Tenant, scope.Route, scope.Key))
	}
	switch {
	case errors.Is(err, job.ErrNotFound):
		if s.Record == nil && len(s.Claims) == 0 {
			return nil, &notFoundError{fmt.Sprintf("no idempotency record and no job for %s/%s/%s", scope.Tenant, scope.Route, scope.Key)}
		}
	case err != nil:
		return nil, err
	default:
		if effectsKnown, err = x.addJob(ctx, s, j); err != nil {
			return nil, err
		}
		if err := x.addCallbacks(ctx, s, j.ID); err != nil {
			return nil, err
		}
	}
	if err := x.addActions(ctx, s, j.ID, scope); err != nil {
		return nil, err
	}
	x.judge(s, effectsKnown)
	return s, nil
}

func (x *Explainer) addRecord(ctx context.Context, s *Story, scope idempotency.Scope) error {
	// Lists are empty, never null, in the JSON document.
	s.Claims, s.Attempts, s.Effects = []openapi.StoryClaim{}, []openapi.StoryAttempt{}, []openapi.StoryEffect{}
	if x.Keys != nil {
		rec, err := x.Keys.Get(ctx, scope)
		switch {
		case errors.Is(err, idempotency.ErrNotFound):
		case err != nil:
			return fmt.Errorf("explain: idempotency record: %w", err)
		default:
			s.Record = storyRecord(RecordDocument(rec))
		}
	}
	if x.Claims == nil {
		s.ClaimLedger = optional(x.NoClaims)
		return nil
	}
	claims, err := x.Claims(ctx, scope)
	if err != nil {
		return fmt.Errorf("explain: claims: %w", err)
	}
	if s.Record != nil {
		// A key free again after its record expired starts a new history.
		kept := claims[:0]
		for _, c := range claims {
			if !c.ClaimedAt.Before(s.Record.CreatedAt.Add(-time.Second)) {
				kept = append(kept, c)
			}
		}
		claims = kept
	}
	s.Claims = append(s.Claims, claims...)
	return nil
}

// addJob adds the job, its execution, attempts and effects, and reports
// whether the effects come from the business tables of the job's task: then
// none means its effect is missing, which the verdict must tell.
func (x *Explainer) addJob(ctx context.Context, s *Story, j job.Row) (bool, error) {
	s.Job = &openapi.StoryJob{
		Id: j.ID, Tenant: j.Tenant, Route: j.Route, IdempotencyKey: j.IdempotencyKey, Task: j.Task, Queue: j.Queue,
		BusinessKey: j.BusinessKey, Status: openapi.JobStatus(j.Status), Attempts: j.Attempts, ResultRef: j.ResultRef,
		Error: j.Error, CreatedAt: j.CreatedAt, UpdatedAt: j.UpdatedAt, NotBefore: j.NotBefore,
		CancelRequestedAt: j.CancelRequestedAt,
	}
	if d := j.Debounce; d != nil {
		s.Job.Debounce = &openapi.StoryDebounce{Key: d.Key, Coalesced: d.Coalesced, FirstAt: d.FirstAt, LastAt: d.LastAt, Until: d.Until}
	}
	of, as, err := job.NewStore(x.DB).Reruns(ctx, j.ID)
	if err != nil {
		return false, fmt.Errorf("explain: %w", err)
	}
	s.Job.RerunOf = optional(of)
	if len(as) > 0 {
		s.Job.RerunAs = &as
	}
	if x.TaskState != nil && !j.Status.Final() {
		state, err := x.TaskState(ctx, j.Queue, job.TaskID(j))
		if err != nil {
			return false, fmt.Errorf("explain: task of %s: %w", j.ID, err)
		}
		if state == "" {
			state = "missing"
		}
		s.Job.TaskState = &state
	}
	if j.BusinessKey == "" {
		return false, nil
	}
	ex, err := execution.New(x.DB).Get(ctx, j.Tenant, j.BusinessKey)
	switch {
	case errors.Is(err, execution.ErrNotFound):
	case err != nil:
		return false, fmt.Errorf("explain: %w", err)
	default:
		s.Execution = &openapi.StoryExecution{Status: string(ex.Status), Attempts: ex.Attempts, FencingToken: ex.FencingToken,
			ResultRef: ex.ResultRef, LastError: ex.LastError}
	}
	entries, err := execution.Attempts(ctx, x.DB, j.Tenant, j.BusinessKey)
	if err != nil {
		return false, fmt.Errorf("explain: %w", err)
	}
	s.Attempts = append(s.Attempts, ledgerRows(j.ID, entries)...)
	known := false
	if x.Effects != nil {
		effects, ok, err := x.Effects(ctx, j.Task, j.Tenant, j.BusinessKey)
		if err != nil {
			return false, fmt.Errorf("explain: effects: %w", err)
		}
		known = ok
		s.Effects = append(s.Effects, effects...)
	}
	if !known && s.Execution != nil && s.Execution.Status == string(job.StatusSucceeded) {
		// An HTTP delivery: its effect is in the receiver's database; what
		// is recorded here is the receiver's 2xx answer and its result_ref.
		s.Effects = append(s.Effects, openapi.StoryEffect{Kind: "delivery", Ref: s.Execution.ResultRef,
			Detail: optional("the receiver answered 2xx (its effect lives in the receiver's database)")})
	}
	attributeEffects(s, j)
	return known, nil
}

// ledgerRows is the ledger of a business key as job id's story shows it.
// The key's rows may have been written by other jobs with the same
// business key (another payload refused, a duplicate acked): those are
// siblings, shown apart and never judged as the job's. The job's own rows
// are numbered as tries, counted or not, and a run after a replay from
// the dead-letter queue is marked.
func ledgerRows(id string, entries []execution.Entry) []openapi.StoryAttempt {
	out := make([]openapi.StoryAttempt, 0, len(entries))
	tries, lastCounted, replay := 0, 0, false
	for _, e := range entries {
		a := openapi.StoryAttempt{Attempt: e.Attempt, Outcome: openapi.StoryAttemptOutcome(e.Outcome), StartedAt: e.StartedAt,
			Error: e.Error, Worker: e.Worker, JobId: e.JobID}
		if e.FencingToken != 0 {
			tok := e.FencingToken
			a.FencingToken = &tok
		}
		if !e.EndedAt.IsZero() {
			end := e.EndedAt
			a.EndedAt = &end
		}
		if e.JobID != id {
			a.Sibling = true
			out = append(out, a)
			continue
		}
		tries++
		a.Try = tries
		a.Counted = counted(e)
		if a.Counted {
			// A failed execution taken again counts from 1: the job ran
			// once more after a replay.
			if lastCounted > 0 && e.Attempt <= lastCounted {
				replay = true
			}
			lastCounted = e.Attempt
		}
		a.Replay = replay
		out = append(out, a)
	}
	return out
}

// counted reports whether a ledger row is one of its job's attempts: it
// drew a fencing token and was not given back. lock_busy, limited and paused rows
// and a delivery refused after a cancel drew none; an unavailable attempt
// is given back (execution.Store.MarkUnavailable), unless it was the last.
func counted(e execution.Entry) bool {
	if e.FencingToken == 0 {
		return false
	}
	switch e.Outcome {
	case execution.OutcomeLockBusy, execution.OutcomeLimited, execution.OutcomePaused:
		return false
	case execution.OutcomeUnavailable:
		return strings.HasPrefix(e.Error, "attempts exhausted") || strings.HasPrefix(e.Error, "asynq retry budget spent")
	}
	return true
}

// attributeEffects names the job that wrote the business key's effects:
// the job of the ledger's succeeded row (the latest), or this job when it
// succeeded and the ledger no longer shows it. Effects another job wrote
// are marked as its; without a succeeded row nothing is attributed.
func attributeEffects(s *Story, j job.Row) {
	owner := ""
	for _, a := range s.Attempts {
		if a.Outcome == openapi.StoryAttemptOutcome(execution.OutcomeSucceeded) {
			owner = a.JobId
		}
	}
	if owner == "" && j.Status == job.StatusSucceeded && len(ownTokened(s.Attempts)) > 0 {
		owner = j.ID
	}
	if owner == "" {
		return
	}
	for i := range s.Effects {
		s.Effects[i].JobId = &owner
		if owner != j.ID {
			sib := true
			s.Effects[i].Sibling = &sib
		}
	}
}

// addActions adds what operators did (the audit trail) to the job with
// jobID and, when scope names one, to its key, oldest first.
func (x *Explainer) addActions(ctx context.Context, s *Story, jobID string, scope idempotency.Scope) error {
	if x.DB == nil {
		return nil
	}
	records := job.NewStore(x.DB)
	var all []job.Action
	if jobID != "" {
		as, err := records.ActionsOnJob(ctx, jobID)
		if err != nil {
			return fmt.Errorf("explain: %w", err)
		}
		all = append(all, as...)
	}
	if scope.Key != "" {
		as, err := records.ActionsOnKey(ctx, scope.Tenant, scope.Route, scope.Key)
		if err != nil {
			return fmt.Errorf("explain: %w", err)
		}
		all = append(all, as...)
	}
	if len(all) == 0 {
		return nil
	}
	slices.SortStableFunc(all, func(a, b job.Action) int { return a.At.Compare(b.At) })
	out := make([]openapi.StoryAction, len(all))
	for i, a := range all {
		out[i] = openapi.StoryAction{Id: a.ID, At: a.At.UTC(), Actor: a.Actor, Action: a.Action, Via: a.Via,
			Filter: optional(a.Filter), Reason: a.Reason}
	}
	s.Actions = &out
	return nil
}
