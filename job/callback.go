package job

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// Callback is a job's on_final: one signed POST to HTTP per final status
// the job reaches (succeeded, failed, cancelled), never one per attempt.
// The URL is declared with the job, never chosen by a producer.
type Callback struct {
	// HTTP is where and how the event is POSTed; its Headers are added to
	// every callback.
	HTTP HTTP
	// MaxAttempts bounds the POSTs of one event; after the last fails the
	// callback is abandoned (recorded, not sent again). Default
	// DefaultCallbackMaxAttempts.
	MaxAttempts int
}

// DefaultCallbackMaxAttempts bounds a callback's attempts when
// Callback.MaxAttempts is 0.
const DefaultCallbackMaxAttempts = 10

// Event is the type of a final-status callback: "job." and the status.
type Event string

// The events, one per final status.
const (
	EventSucceeded Event = "job.succeeded"
	EventFailed    Event = "job.failed"
	EventCancelled Event = "job.cancelled"
)

// EventOf returns the event of a final status; false for a status that is
// not final.
func EventOf(s Status) (Event, bool) {
	switch s {
	case StatusSucceeded:
		return EventSucceeded, true
	case StatusFailed:
		return EventFailed, true
	case StatusCancelled:
		return EventCancelled, true
	}
	return "", false
}

// CallbackID is the webhook-id of a job's seq-th final status: "<job
// id>:final" for the first, "<job id>:final:<seq>" when a job replayed
// from the dead-letter queue ends again. Every attempt of one event has
// the same id, so a receiver dedupes by it; a new final status is a new
// event with a new id.
func CallbackID(jobID string, seq int) string {
	if seq <= 1 {
		return jobID + ":final"
	}
	return jobID + ":final:" + strconv.Itoa(seq)
}

// Callbacks is the outbox of final-status callbacks (the job_callbacks
// table) and their ledger (job_callback_attempts). Collect turns the jobs
// that became final into events, whatever made them final (a worker, a
// cancel, `idemgate dlq`); Claim hands due events to one sender; Attempted
// records each attempt.
type Callbacks struct{ db DB }

// NewCallbacks returns the callback outbox on db.
func NewCallbacks(db DB) *Callbacks { return &Callbacks{db: db} }

// Document is how an event's data shows a job: the job document of GET
// /v1/jobs/{id}.
type Document func(Row) any

// eventBody is a callback's body, the Standard Webhooks payload shape.
type eventBody struct {
	Type      Event           `json:"type"`
	Timestamp string          `json:"timestamp"`
	Data      json.RawMessage `json:"data"`
}

// Collect makes the events of at most limit jobs of tasks that became
// final and have none yet, oldest first, and reports how many jobs it
// looked at. An event's body is fixed here: {"type", "timestamp" (when
// the job became final), "data" (doc of the job, with the job's "tenant"
// first)}. Several collectors
// share the work: a job another one is collecting is skipped.
func (c *Callbacks) Collect(ctx context.Context, tasks []string, limit int, doc Document) (int, error) {
	if len(tasks) == 0 || limit <= 0 {
		return 0, nil
	}
	const pick = `SELECT ` + recordColumns + ` FROM jobs
 WHERE task = ANY($1) AND finished_at IS NOT NULL AND callback_for IS DISTINCT FROM finished_at
 ORDER BY finished_at LIMIT $2`
	rows, err := c.db.Query(ctx, pick, tasks, limit)
	if err != nil {
		return 0, fmt.Errorf("job: collect callbacks: %w", err)
	}
	var picked []Row
	for rows.Next() {
		j, err := scanRecord(rows)
		if err != nil {
			rows.Close()
			return 0, fmt.Errorf("job: collect callbacks: %w", err)
		}
		picked = append(picked, j)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("job: collect callbacks: %w", err)
	}
	if len(picked) == 0 {
		return 0, nil
	}
	var ids, taskNames, events, bodies []string
	var finished []time.Time
	for _, j := range picked {
		ev, final := EventOf(j.Status)
		body := ""
		if final {
			b, err := encodeEvent(ev, j, doc)
			if err != nil {
				return 0, fmt.Errorf("job: collect callbacks: %s: %w", j.ID, err)
			}
			body = string(b)
		}
		// A row that is not final (it cannot be: finished_at says it is)
		// is marked and gets no event.
		ids, taskNames, events, bodies = append(ids, j.ID), append(taskNames, j.Task), append(events, string(ev)), append(bodies, body)
		finished = append(finished, *j.FinishedAt)
	}
	// The rows are locked and checked again in the statement that makes
	// their events: a job another collector has marked meanwhile, or that
	// a dead-letter replay has reopened, is left alone, and no
	// transaction spans a round trip.
	const mark = `
WITH input AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::timestamptz[])
        AS t(job_id, task, event, body, finished_at)
), locked AS (
    SELECT i.* FROM jobs j JOIN input i ON j.id = i.job_id
     WHERE j.finished_at = i.finished_at AND j.callback_for IS DISTINCT FROM j.finished_at
       FOR UPDATE OF j SKIP LOCKED
), ins AS (
    INSERT INTO job_callbacks (job_id, seq, task, event, body)
    SELECT l.job_id, COALESCE((SELECT max(c.seq) FROM job_callbacks c WHERE c.job_id = l.job_id), 0) + 1,
           l.task, l.event, l.body
      FROM locked l WHERE l.event <> ''
)
UPDATE jobs j SET callback_for = l.finished_at FROM locked l WHERE j.id = l.job_id`
	if _, err := c.db.Exec(ctx, mark, ids, taskNames, events, bodies, finished); err != nil {
		return 0, fmt.Errorf("job: collect callbacks: %w", err)
	}
	return len(picked), nil
}

// encodeEvent is the body of the event: the job document as data, as GET
// /v1/jobs/{id} would show it when the job became final, and the job's
// tenant in it. The callback URL is the task's, shared by every tenant:
// the signed body says whose job it is.
func encodeEvent(ev Event, j Row, doc Document) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(doc(j)); err != nil {
		return nil, err
	}
	data, err := withTenant(bytes.TrimSuffix(buf.Bytes(), []byte("\n")), j.Tenant)
	if err != nil {
		return nil, err
	}
	buf2 := bytes.Buffer{}
	enc = json.NewEncoder(&buf2)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(eventBody{Type: ev, Timestamp: j.FinishedAt.UTC().Format(time.RFC3339Nano), Data: data}); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf2.Bytes(), []byte("\n")), nil
}

// withTenant returns the JSON object doc with a first member "tenant":
// tenant, unless doc has a member "tenant" already, which must be tenant.
func withTenant(doc []byte, tenant string) ([]byte, error) {
	var members map[string]json.RawMessage
	if err := json.Unmarshal(doc, &members); err != nil || members == nil {
		return nil, fmt.Errorf("the job document is not a JSON object: %s", clipText(doc))
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // as the rest of the body
	if err := enc.Encode(tenant); err != nil {
		return nil, err
	}
	name := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	if have, ok := members["tenant"]; ok {
		var got string
		if json.Unmarshal(have, &got) != nil || got != tenant {
			return nil, fmt.Errorf("the job document names tenant %s, not the job's %s", have, name)
		}
		return doc, nil
	}
	out := append([]byte(`{"tenant":`), name...)
	if rest := bytes.TrimSpace(doc[1:]); len(rest) > 0 && rest[0] != '}' {
		out = append(out, ',')
	}
	return append(out, doc[1:]...), nil
}

// clipText is the start of b, for an error message.
func clipText(b []byte) string {
	if len(b) > 64 {
		return string(b[:64]) + "…"
	}
	return string(b)
}

// PendingCallback is an event claimed for one attempt.
type PendingCallback struct {
	JobID string
	Seq   int
	Task  string
	// Tenant is the job's tenant; "" when its record is gone.
	Tenant string
	Event  Event
	// Body is the event as it is signed and sent, the same on every attempt.
	Body []byte
	// Attempt counts this one: 1 for the first POST.
	Attempt int
	// ClaimedAt is when the attempt was claimed (the database's clock).
	ClaimedAt time.Time
}

// ID is the event's webhook-id.
func (p PendingCallback) ID() string { return CallbackID(p.JobID, p.Seq) }

// Claim takes at most limit due events of tasks for one attempt each,
// oldest due first: it counts the attempt and moves the event's due time
// lease ahead, so that no other sender takes it meanwhile. A sender that
// dies before Attempted leaves the event due again after lease: it is sent
// again, with the same webhook-id and body.
func (c *Callbacks) Claim(ctx context.Context, tasks []string, limit int, lease time.Duration) ([]PendingCallback, error) {
	if len(tasks) == 0 || limit <= 0 {
		return nil, nil
	}
	const q = `
UPDATE job_callbacks c SET attempts = c.attempts + 1, due_at = now() + make_interval(secs => $3)
  FROM (SELECT job_id, seq FROM job_callbacks
         WHERE delivered_at IS NULL AND abandoned_at IS NULL AND due_at <= now() AND task = ANY($1)
         ORDER BY due_at LIMIT $2
         FOR UPDATE SKIP LOCKED) d
 WHERE c.job_id = d.job_id AND c.seq = d.seq
RETURNING c.job_id, c.seq, c.task, COALESCE((SELECT j.tenant FROM jobs j WHERE j.id = c.job_id), ''),
          c.event, c.body, c.attempts, now()`
	rows, err := c.db.Query(ctx, q, tasks, limit, lease.Seconds())
	if err != nil {
		return nil, fmt.Errorf("job: claim callbacks: %w", err)
	}
	defer rows.Close()
	var out []PendingCallback
	for rows.Next() {
		var p PendingCallback
		var body string
		if err := rows.Scan(&p.JobID, &p.Seq, &p.Task, &p.Tenant, &p.Event, &body, &p.Attempt, &p.ClaimedAt); err != nil {
			return nil, fmt.Errorf("job: claim callbacks: %w", err)
		}
		p.Body = []byte(body)
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("job: claim callbacks: %w", err)
	}
	return out, nil
}

// CallbackOutcome is how a callback attempt ended.
type CallbackOutcome string

// The outcomes of a callback attempt (job_callback_attempts.outcome).
const (
	// CallbackDelivered: the receiver answered 2xx. No more attempts.
	CallbackDelivered CallbackOutcome = "delivered"
	// CallbackRetry: it did not; another attempt is due later.
	CallbackRetry CallbackOutcome = "retry"
	// CallbackAbandoned: it did not, and the attempts are used up (or the
	// receiver refused the event for good). No more attempts.
	CallbackAbandoned CallbackOutcome = "abandoned"
)

// CallbackResult is what one attempt found.
type CallbackResult struct {
	Outcome CallbackOutcome
	// Status is the receiver's HTTP status; 0 when it did not answer.
	Status int
	// Error says why it was not delivered; "" when it was.
	Error string
	// Retry is how long until the next attempt (CallbackRetry).
	Retry time.Duration
	// Worker names the process that sent it.
	Worker string
	// StartedAt is when the POST began.
	StartedAt time.Time
}

// Attempted records an attempt of p: a ledger row always, and the event's new
// state unless another sender has claimed it since (its lease ran out).
func (c *Callbacks) Attempted(ctx context.Context, p PendingCallback, r CallbackResult) error {
	const q = `
WITH upd AS (
    UPDATE job_callbacks
       SET delivered_at = CASE WHEN $4 = 'delivered' THEN now() END,
           abandoned_at = CASE WHEN $4 = 'abandoned' THEN now() END,
           due_at = CASE WHEN $4 = 'retry' THEN now() + make_interval(secs => $7) ELSE due_at END,
           last_status = NULLIF($5, 0), last_error = NULLIF($6, '')
     WHERE job_id = $1 AND seq = $2 AND attempts = $3 AND delivered_at IS NULL AND abandoned_at IS NULL
)
INSERT INTO job_callback_attempts (job_id, seq, attempt, worker, started_at, status, outcome, error)
VALUES ($1, $2, $3, $8, $9, NULLIF($5, 0), $4, NULLIF($6, ''))`
	_, err := c.db.Exec(ctx, q, p.JobID, p.Seq, p.Attempt, string(r.Outcome), r.Status, StorableText(r.Error),
		r.Retry.Seconds(), StorableText(r.Worker), r.StartedAt)
	if err != nil {
		return fmt.Errorf("job: record callback attempt %s: %w", p.ID(), err)
	}
	return nil
}

// CallbackState is an event of a job as the outbox holds it, with its
// attempts.
type CallbackState struct {
	ID          string // the webhook-id
	Seq         int
	Event       Event
	CreatedAt   time.Time
	Attempts    int
	DueAt       time.Time
	DeliveredAt *time.Time
	AbandonedAt *time.Time
	LastStatus  *int
	LastError   *string
	Tries       []CallbackAttempt
}

// CallbackAttempt is one POST of an event (a job_callback_attempts row).
type CallbackAttempt struct {
	Attempt   int
	Worker    string
	StartedAt time.Time
	EndedAt   time.Time
	Status    *int
	Outcome   CallbackOutcome
	Error     *string
}

// OfJob lists the events of job id, oldest first, each with its attempts.
func (c *Callbacks) OfJob(ctx context.Context, id string) ([]CallbackState, error) {
	if !Storable(id) {
		return nil, nil
	}
	rows, err := c.db.Query(ctx, `
SELECT seq, event, created_at, attempts, due_at, delivered_at, abandoned_at, last_status, last_error
  FROM job_callbacks WHERE job_id = $1 ORDER BY seq`, id)
	if err != nil {
		return nil, fmt.Errorf("job: callbacks of %s: %w", id, err)
	}
	var out []CallbackState
	for rows.Next() {
		var s CallbackState
		if err := rows.Scan(&s.Seq, &s.Event, &s.CreatedAt, &s.Attempts, &s.DueAt, &s.DeliveredAt, &s.AbandonedAt,
			&s.LastStatus, &s.LastError); err != nil {
			rows.Close()
			return nil, fmt.Errorf("job: callbacks of %s: %w", id, err)
		}
		s.ID = CallbackID(id, s.Seq)
		out = append(out, s)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("job: callbacks of %s: %w", id, err)
	}
	rows, err = c.db.Query(ctx, `
SELECT seq, attempt, worker, started_at, ended_at, status, outcome, error
  FROM job_callback_attempts WHERE job_id = $1 ORDER BY seq, attempt, id`, id)
	if err != nil {
		return nil, fmt.Errorf("job: callback attempts of %s: %w", id, err)
	}
	defer rows.Close()
	for rows.Next() {
		var seq int
		var a CallbackAttempt
		if err := rows.Scan(&seq, &a.Attempt, &a.Worker, &a.StartedAt, &a.EndedAt, &a.Status, &a.Outcome, &a.Error); err != nil {
			return nil, fmt.Errorf("job: callback attempts of %s: %w", id, err)
		}
		for i := range out {
			if out[i].Seq == seq {
				out[i].Tries = append(out[i].Tries, a)
			}
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("job: callback attempts of %s: %w", id, err)
	}
	return out, nil
}
