package job

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Debounce folds the submits of a job that arrive close together into
// one pending job (jobs[].debounce). The submits of one task whose key
// renders the same, within a tenant, make one job: each new submit
// postpones it by Delay, never past its first submit plus MaxDelay.
type Debounce struct {
	// Key forms the debounce key from the job: {tenant} is the job's
	// tenant, any other {field} a field its schema requires. Required.
	Key Template
	// Delay is how long after the latest submit the job runs. From
	// MinDebounceDelay to MaxDebounceDelay.
	Delay time.Duration
	// MaxDelay is the longest the first submit's job may be postponed.
	// Required, at least Delay.
	MaxDelay time.Duration
	// Mode says which body the job runs with. Default DebounceTrailing.
	Mode DebounceMode
}

// DebounceMode says which of the folded submits' bodies the job keeps.
type DebounceMode string

const (
	// DebounceTrailing: the latest body wins.
	DebounceTrailing DebounceMode = "trailing"
	// DebounceLeading: the first body stays; later submits only postpone
	// the job.
	DebounceLeading DebounceMode = "leading"
)

// DebounceModes lists the modes, the default first.
func DebounceModes() []DebounceMode { return []DebounceMode{DebounceTrailing, DebounceLeading} }

// Bounds of Debounce.Delay.
const (
	MinDebounceDelay = time.Second
	MaxDebounceDelay = 7 * 24 * time.Hour
)

// Check says what is wrong with d, every problem at once, each prefixed
// with the key it is about (delay, max_delay, mode).
func (d Debounce) Check() error {
	var errs []error
	switch {
	case d.Delay == 0:
		errs = append(errs, errors.New("delay: required: how long after the latest submit the job runs, from 1s to 7d (168h)"))
	case d.Delay < MinDebounceDelay || d.Delay > MaxDebounceDelay:
		errs = append(errs, fmt.Errorf("delay: %s is outside 1s to 7d (168h)", d.Delay))
	}
	switch {
	case d.MaxDelay == 0:
		errs = append(errs, errors.New("max_delay: required: the longest the first submit may be postponed, at least delay"))
	case d.MaxDelay < d.Delay && d.Delay > 0:
		errs = append(errs, fmt.Errorf("max_delay: %s is below delay %s", d.MaxDelay, d.Delay))
	}
	if d.Mode != "" && d.Mode != DebounceTrailing && d.Mode != DebounceLeading {
		errs = append(errs, fmt.Errorf("mode: %q is not trailing or leading", d.Mode))
	}
	return errors.Join(errs...)
}

// trailing reports whether the latest body wins.
func (d *Debounce) trailing() bool { return d.Mode != DebounceLeading }

// Value renders the debounce key of a job of tenant whose payload is data:
// {tenant} is tenant, every other field renders as a business key's does.
func (d *Debounce) Value(tenant string, data any) (string, error) {
	v, err := renderTenantKey(d.Key, tenant, data)
	if err != nil {
		return "", fmt.Errorf("debounce key %s: %w", d.Key, err)
	}
	return v, nil
}

// faults adds the faults of the debounce key a payload forms.
func (d *Debounce) faults(data any, faults []FieldError) []FieldError {
	return append(faults, d.Key.keyFaults("debounce key", data, "", 0, true)...)
}

// Debounced is what a debounced job's record says of its cycle.
type Debounced struct {
	// Key is the rendered debounce key.
	Key string `json:"key"`
	// Coalesced counts the submits folded into the job, from 1.
	Coalesced int `json:"coalesced"`
	// FirstAt and LastAt are when the first and the latest submit
	// arrived.
	FirstAt time.Time `json:"first_at"`
	LastAt  time.Time `json:"last_at"`
	// Until is the latest the job may run: the first submit plus
	// max_delay.
	Until time.Time `json:"until"`
}

// debounceColumn reads a job's debounce columns as one JSON value, NULL
// for a job that is not debounced.
const debounceColumn = `CASE WHEN debounce_key IS NOT NULL THEN json_build_object('key', debounce_key,
	'coalesced', debounce_coalesced, 'first_at', debounce_first_at, 'last_at', debounce_last_at,
	'until', debounce_until) END`

// HeaderDebounce is the task header of a debounced job's task: the
// job's Debounced.Coalesced when the task was sent. The worker's take
// refuses a task whose job a later submit has changed since.
const HeaderDebounce = "debounce"

// TaskID is the asynq TaskID of r's current task: its id, or for a
// debounced job that later submits changed, "<id>:d<n>" with n the
// submits folded in. Each change sends a task of its own, with the body
// and the time it made, and the earlier ones are refused by the take.
func TaskID(r Row) string {
	if r.Debounce == nil {
		return r.ID
	}
	return versionID(r.ID, r.Debounce.Coalesced)
}

// versionID is the TaskID of version n of debounced job id: id itself for
// the first.
func versionID(id string, n int) string {
	if n <= 1 {
		return id
	}
	return id + ":d" + strconv.Itoa(n)
}

// taskJobID is the job id of a TaskID that versionID made.
func taskJobID(taskID string) string {
	id, n, ok := strings.Cut(taskID, ":d")
	if !ok || n == "" || strings.Trim(n, "0123456789") != "" {
		return taskID
	}
	return id
}

// submitDebounced records a debounced job: it folds the request into
// its key's pending job, or inserts a new one (debounceSQL). It reports
// whether the request was folded into a job another request recorded.
func (e *Submitter) submitDebounced(ctx context.Context, req Request, p Payload, queue string) (Row, bool, error) {
	d := req.Spec.Debounce
	key, err := d.Value(req.Tenant, p.Data)
	if err != nil {
		return Row{}, false, &PayloadError{Kind: ErrInvalid, Fields: []FieldError{{Message: err.Error()}}}
	}
	id := ID(req.Tenant, req.Route, req.Key)
	for range 3 {
		var got Row
		var how string
		err := e.records.db.QueryRow(ctx, debounceSQL, id, req.Tenant, req.Route, req.Key, req.Spec.Task, queue,
			p.BusinessKey, req.Body, key, d.Delay.Seconds(), d.MaxDelay.Seconds(), d.trailing()).
			Scan(append(got.scanTargets(), &how)...)
		if errors.Is(err, pgx.ErrNoRows) {
			continue // a concurrent insert of the key's job, or of this id
		}
		if err != nil {
			return Row{}, false, fmt.Errorf("job: debounce: %w", err)
		}
		return got, how == "coalesced", nil
	}
	return Row{}, false, errors.New("job: debounce: the job was neither folded, inserted nor found")
}

// debounceSQL records a debounced request in one statement: the job its
// own key recorded before, if any (a retry), unchanged; else the key's
// pending job, postponed to least(now() + delay, until), its body
// replaced in trailing mode ($12), one more submit counted; else a new
// job, scheduled now() + delay, until now() + max_delay. A job a worker
// has taken (processing, an attempt counted) is left alone: the insert
// starts the next cycle beside it.
const debounceSQL = `
WITH mine AS (
    SELECT id FROM jobs WHERE id = $1
), upd AS (
    UPDATE jobs SET
        not_before   = least(now() + make_interval(secs => $10::float8), debounce_until),
        status       = CASE WHEN least(now() + make_interval(secs => $10::float8), debounce_until) > now()
                            THEN 'scheduled' ELSE 'queued' END,
        payload      = CASE WHEN $12::boolean THEN $8::jsonb ELSE payload END,
        business_key = CASE WHEN $12::boolean THEN $7::text ELSE business_key END,
        debounce_coalesced = debounce_coalesced + 1,
        debounce_last_at   = now(),
        updated_at   = now()
     WHERE tenant = $2 AND task = $5 AND debounce_key = $9
       AND status IN ('scheduled', 'queued') AND attempts = 0
       AND NOT EXISTS (SELECT 1 FROM mine)
    RETURNING ` + recordColumns + `, 'coalesced'::text
), ins AS (
    INSERT INTO jobs (id, tenant, route, idempotency_key, task, queue, business_key, payload, not_before, status,
                      debounce_key, debounce_first_at, debounce_last_at, debounce_until, debounce_coalesced)
    SELECT $1, $2, $3, $4, $5, $6, $7, $8, now() + make_interval(secs => $10::float8), 'scheduled',
           $9, now(), now(), now() + make_interval(secs => $11::float8), 1
     WHERE NOT EXISTS (SELECT 1 FROM mine) AND NOT EXISTS (SELECT 1 FROM upd)
    ON CONFLICT DO NOTHING
    RETURNING ` + recordColumns + `, 'created'::text
)
SELECT * FROM upd
UNION ALL
SELECT * FROM ins
UNION ALL
SELECT ` + recordColumns + `, 'existing' FROM jobs WHERE id = $1 AND EXISTS (SELECT 1 FROM mine)`

// renderTenantKey renders a key template in which {tenant} is tenant,
// even when the payload has a field called tenant; every other field
// renders as a business key's does.
func renderTenantKey(t Template, tenant string, data any) (string, error) {
	var b strings.Builder
	for _, p := range t.parts {
		switch {
		case p.path == nil:
			b.WriteString(p.literal)
		case len(p.path) == 1 && p.path[0] == tenantField:
			t.writeValue(&b, tenant)
		default:
			s, err := renderField(data, p.path)
			if err != nil {
				return "", err
			}
			t.writeValue(&b, s)
		}
	}
	return b.String(), nil
}

// dropSuperseded takes out the task of the version of r that r's latest
// submit superseded: from the queue, when the Submitter has an
// Inspector, and from r's fairness pool, wherever it waits there. It only
// spares the task a delivery and a place in the pool's window: the
// dispatcher drops a superseded version it finds, and the take refuses
// its task. A failure to take it out is not the submit's.
func (e *Submitter) dropSuperseded(ctx context.Context, r Row) {
	if r.Debounce == nil || r.Debounce.Coalesced < 2 {
		return
	}
	prev := versionID(r.ID, r.Debounce.Coalesced-1)
	if u, ok := e.Fairness.pooled(r.Task); ok {
		_ = e.Fairness.remove(ctx, u.pool, r.Tenant, prev)
	}
	if e.Inspector != nil {
		_ = e.Inspector.DeleteTask(r.Queue, prev)
	}
}
