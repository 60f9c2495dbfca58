package job

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Overlap is what a recurring schedule does with a slot whose earlier
// fires have not finished.
type Overlap string

const (
	// OverlapSkip records the slot as skipped while an earlier fire is
	// not final. The default.
	OverlapSkip Overlap = "skip"
	// OverlapBufferOne fires the slot behind one unfinished fire, and
	// skips it behind two.
	OverlapBufferOne Overlap = "buffer_one"
	// OverlapAllow always fires.
	OverlapAllow Overlap = "allow"
)

// Catchup is what a recurring schedule does with slots the scheduler
// finds late (after downtime).
type Catchup string

const (
	// CatchupNone records every late slot as missed. The default.
	CatchupNone Catchup = "none"
	// CatchupOne fires the latest late slot within the catch-up window.
	CatchupOne Catchup = "one"
	// CatchupAll fires each late slot within the window, at most
	// MaxCatchup.
	CatchupAll Catchup = "all"
)

// MaxCatchup is the most late slots CatchupAll fires at once.
const MaxCatchup = 100

// SlotOutcome is what became of one slot of a recurring schedule.
type SlotOutcome string

const (
	// SlotFired: the slot's job was recorded; its status is the slot's.
	SlotFired SlotOutcome = "fired"
	// SlotSkippedOverlap: an earlier fire had not finished (OverlapSkip).
	SlotSkippedOverlap SlotOutcome = "skipped_overlap"
	// SlotSkippedMissed: found late, and not caught up.
	SlotSkippedMissed SlotOutcome = "skipped_missed"
	// SlotSkippedPaused: the schedule was paused.
	SlotSkippedPaused SlotOutcome = "skipped_paused"
)

// Source says who declared a recurring schedule.
type Source string

const (
	// SourceConfig: the configuration's schedules, written at each start.
	SourceConfig Source = "config"
	// SourceAPI: a tenant's PUT /v1/schedules/{id}.
	SourceAPI Source = "api"
)

// Recurring is one recurring schedule: a job submitted at each slot of
// its Timing.
type Recurring struct {
	Tenant, ID string
	// Task is the declared job each fire becomes.
	Task   string
	Timing Timing
	// Body is the payload of every fire, valid against the task's schema.
	Body    json.RawMessage
	Overlap Overlap
	Catchup Catchup
	// CatchupWindow is how late a slot may be and still be caught up.
	CatchupWindow time.Duration
	// Jitter spreads each fire over [slot, slot+Jitter): a fire's
	// not_before is its slot plus a delay derived from the slot.
	Jitter time.Duration
	Paused bool
	// NextFireAt is the first slot the scheduler has not handled.
	NextFireAt           time.Time
	Source               Source
	CreatedAt, UpdatedAt time.Time
}

// FireRoute is the route of the jobs a recurring schedule fires: their
// idempotency scope is (tenant, FireRoute(id), the slot).
func FireRoute(id string) string { return "schedule:" + id }

// ScheduleOf returns the schedule id of a job a schedule fired, from its
// route.
func ScheduleOf(r Row) (string, bool) { return strings.CutPrefix(r.Route, "schedule:") }

// slotKey is a slot as a fire's idempotency key.
func slotKey(slot time.Time) string { return slot.UTC().Format(time.RFC3339) }

// FireID is the id of the job that schedule id of tenant fires at slot.
func FireID(tenant, id string, slot time.Time) string {
	return ID(tenant, FireRoute(id), slotKey(slot))
}

// fireKey is the business key of a fire: its own, whatever the body, so
// that the worker runs every slot rather than taking the second as a
// replay of the first.
func fireKey(id, key string) string { return "schedule:" + id + ":" + key }

// jitterOf derives a slot's jitter from the schedule and the slot, so
// that every scheduler picks the same not_before.
func (r Recurring) jitterOf(slot time.Time) time.Duration {
	if r.Jitter <= 0 {
		return 0
	}
	h := sha256.Sum256([]byte(r.Tenant + "\x00" + r.ID + "\x00" + slotKey(slot)))
	return time.Duration(binary.BigEndian.Uint64(h[:8]) % uint64(r.Jitter))
}

// ErrScheduleQuota: the tenant has as many schedules as it may. Nothing
// was written.
var ErrScheduleQuota = errors.New("job: schedule quota exceeded")

// Schedules reads and writes the schedules and schedule_slots tables.
type Schedules struct{ db DB }

// NewSchedules returns the schedules store on db.
func NewSchedules(db DB) *Schedules { return &Schedules{db: db} }

const recurringColumns = `tenant, id, task, spec, zone, body, overlap, catchup,
	extract(epoch FROM catchup_window)::float8, extract(epoch FROM jitter)::float8, paused, next_fire_at, source, created_at, updated_at`

func scanRecurring(row pgx.Row) (Recurring, error) {
	var r Recurring
	var spec, zone string
	var window, jitter float64
	err := row.Scan(&r.Tenant, &r.ID, &r.Task, &spec, &zone, &r.Body, &r.Overlap, &r.Catchup,
		&window, &jitter, &r.Paused, &r.NextFireAt, &r.Source, &r.CreatedAt, &r.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Recurring{}, ErrNotFound
	}
	if err != nil {
		return Recurring{}, err
	}
	r.CatchupWindow = time.Duration(window * float64(time.Second))
	r.Jitter = time.Duration(jitter * float64(time.Second))
	if r.Timing, err = ParseStoredTiming(spec, zone); err != nil {
		return Recurring{}, fmt.Errorf("schedule %s/%s: %w", r.Tenant, r.ID, err)
	}
	return r, nil
}

// Put creates or replaces r and reports whether it created it. A new
// schedule's first slot is the first after now; a replaced one keeps its
// next_fire_at and its pause unless its timing changed. With max > 0, a
// tenant already holding max schedules cannot create another
// (ErrScheduleQuota).
func (s *Schedules) Put(ctx context.Context, r Recurring, now time.Time, max int) (Recurring, bool, error) {
	const q = `
INSERT INTO schedules (tenant, id, task, spec, zone, body, overlap, catchup, catchup_window, jitter, next_fire_at, source)
SELECT $1, $2, $3, $4, $5, $6, $7, $8, make_interval(secs => $9), make_interval(secs => $10), $11, $12
 WHERE $13 <= 0
    OR (SELECT count(*) FROM schedules WHERE tenant = $1) < $13
    OR EXISTS (SELECT 1 FROM schedules WHERE tenant = $1 AND id = $2)
ON CONFLICT (tenant, id) DO UPDATE SET
    task = EXCLUDED.task, body = EXCLUDED.body, overlap = EXCLUDED.overlap, catchup = EXCLUDED.catchup,
    catchup_window = EXCLUDED.catchup_window, jitter = EXCLUDED.jitter, source = EXCLUDED.source,
    next_fire_at = CASE WHEN schedules.spec = EXCLUDED.spec AND schedules.zone = EXCLUDED.zone
                        THEN schedules.next_fire_at ELSE EXCLUDED.next_fire_at END,
    spec = EXCLUDED.spec, zone = EXCLUDED.zone, updated_at = now()
RETURNING ` + recurringColumns + `, xmax = 0`
	next := r.Timing.Next(now)
	if next.IsZero() {
		return Recurring{}, false, errors.New("job: put schedule: it never fires")
	}
	var created bool
	var got Recurring
	row := s.db.QueryRow(ctx, q, r.Tenant, r.ID, r.Task, r.Timing.String(), r.Timing.Zone.String(), r.Body,
		defaultOverlap(r.Overlap), defaultCatchup(r.Catchup), r.CatchupWindow.Seconds(), r.Jitter.Seconds(), next, r.Source, max)
	got, err := scanRecurring(scanCreated{row, &created})
	switch {
	case errors.Is(err, ErrNotFound):
		return Recurring{}, false, ErrScheduleQuota
	case err != nil:
		return Recurring{}, false, fmt.Errorf("job: put schedule: %w", err)
	}
	return got, created, nil
}

// scanCreated scans one more column, a bool, after the others.
type scanCreated struct {
	row     pgx.Row
	created *bool
}

func (s scanCreated) Scan(dest ...any) error { return s.row.Scan(append(dest, s.created)...) }

func defaultOverlap(o Overlap) Overlap {
	if o == "" {
		return OverlapSkip
	}
	return o
}

func defaultCatchup(c Catchup) Catchup {
	if c == "" {
		return CatchupNone
	}
	return c
}

// Declare makes the configuration's schedules those of source config:
// each is put, and a config schedule no longer declared is deleted.
func (s *Schedules) Declare(ctx context.Context, rs []Recurring, now time.Time) error {
	begin, ok := s.db.(interface {
		Begin(ctx context.Context) (pgx.Tx, error)
	})
	if !ok {
		return errors.New("job: declare schedules: the store cannot begin a transaction")
	}
	return pgx.BeginFunc(ctx, begin, func(tx pgx.Tx) error {
		in := &Schedules{db: tx}
		tenants, ids := make([]string, 0, len(rs)), make([]string, 0, len(rs))
		for _, r := range rs {
			r.Source = SourceConfig
			if _, _, err := in.Put(ctx, r, now, 0); err != nil {
				return err
			}
			tenants, ids = append(tenants, r.Tenant), append(ids, r.ID)
		}
		_, err := tx.Exec(ctx, `DELETE FROM schedules s WHERE source = 'config'
   AND NOT EXISTS (SELECT 1 FROM unnest($1::text[], $2::text[]) k(tenant, id) WHERE k.tenant = s.tenant AND k.id = s.id)`, tenants, ids)
		if err != nil {
			return fmt.Errorf("job: declare schedules: %w", err)
		}
		return nil
	})
}

// Get returns tenant's schedule id.
func (s *Schedules) Get(ctx context.Context, tenant, id string) (Recurring, error) {
	if !Storable(tenant) || !Storable(id) {
		return Recurring{}, ErrNotFound
	}
	r, err := scanRecurring(s.db.QueryRow(ctx, `SELECT `+recurringColumns+` FROM schedules WHERE tenant = $1 AND id = $2`, tenant, id))
	if err != nil && !errors.Is(err, ErrNotFound) {
		return Recurring{}, fmt.Errorf("job: get schedule: %w", err)
	}
	return r, err
}

// Find returns the schedule id whatever its tenant when tenant is "",
// refusing an id two tenants share (operators).
func (s *Schedules) Find(ctx context.Context, tenant, id string) (Recurring, error) {
	if tenant != "" {
		return s.Get(ctx, tenant, id)
	}
	rs, err := s.query(ctx, `SELECT `+recurringColumns+` FROM schedules WHERE id = $1 LIMIT 2`, id)
	switch {
	case err != nil:
		return Recurring{}, err
	case len(rs) == 0:
		return Recurring{}, ErrNotFound
	case len(rs) > 1:
		return Recurring{}, fmt.Errorf("job: schedule %s: tenants %s and %s both have one; name the tenant", id, rs[0].Tenant, rs[1].Tenant)
	}
	return rs[0], nil
}

// List returns tenant's schedules by id.
func (s *Schedules) List(ctx context.Context, tenant string) ([]Recurring, error) {
	return s.query(ctx, `SELECT `+recurringColumns+` FROM schedules WHERE tenant = $1 ORDER BY id`, tenant)
}

func (s *Schedules) query(ctx context.Context, q string, args ...any) ([]Recurring, error) {
	rows, err := s.db.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("job: list schedules: %w", err)
	}
	defer rows.Close()
	var out []Recurring
	for rows.Next() {
		r, err := scanRecurring(rows)
		if err != nil {
			return nil, fmt.Errorf("job: list schedules: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("job: list schedules: %w", err)
	}
	return out, nil
}

// Delete removes tenant's schedule id and its slot history. Its fired
// jobs stay.
func (s *Schedules) Delete(ctx context.Context, tenant, id string) error {
	if !Storable(tenant) || !Storable(id) {
		return ErrNotFound
	}
	var n int
	err := s.db.QueryRow(ctx, `
WITH d AS (DELETE FROM schedules WHERE tenant = $1 AND id = $2 RETURNING 1),
     h AS (DELETE FROM schedule_slots WHERE tenant = $1 AND schedule_id = $2 AND EXISTS (SELECT 1 FROM d))
SELECT count(*) FROM d`, tenant, id).Scan(&n)
	if err != nil {
		return fmt.Errorf("job: delete schedule: %w", err)
	}
	if n == 0 {
		return ErrNotFound
	}
	return nil
}

// SetPaused pauses or resumes tenant's schedule id and returns it.
func (s *Schedules) SetPaused(ctx context.Context, tenant, id string, paused bool) (Recurring, error) {
	if !Storable(tenant) || !Storable(id) {
		return Recurring{}, ErrNotFound
	}
	r, err := scanRecurring(s.db.QueryRow(ctx, `UPDATE schedules SET paused = $3, updated_at = now()
 WHERE tenant = $1 AND id = $2 RETURNING `+recurringColumns, tenant, id, paused))
	if err != nil && !errors.Is(err, ErrNotFound) {
		return Recurring{}, fmt.Errorf("job: pause schedule: %w", err)
	}
	return r, err
}

// Slot is one handled slot of a schedule.
type Slot struct {
	Slot    time.Time
	Outcome SlotOutcome
	// JobID and Status are the fired job's; empty for a skipped slot, or
	// a fired one whose job the retention deleted.
	JobID  string
	Status Status
	// NotBefore is when the fired job was due (slot plus jitter), and
	// RecordedAt when the scheduler recorded the slot.
	NotBefore  *time.Time
	RecordedAt time.Time
}

// Slots returns the last n slots of tenant's schedule id, newest first.
// With fired, only the fired ones.
func (s *Schedules) Slots(ctx context.Context, tenant, id string, n int, fired bool) ([]Slot, error) {
	rows, err := s.db.Query(ctx, `
SELECT s.slot, s.outcome, COALESCE(s.job_id, ''), COALESCE(j.status, ''), j.not_before, s.recorded_at
  FROM schedule_slots s
  LEFT JOIN jobs j ON j.id = s.job_id AND j.tenant = s.tenant
 WHERE s.tenant = $1 AND s.schedule_id = $2 AND (NOT $4 OR s.outcome = 'fired')
 ORDER BY s.slot DESC
 LIMIT $3`, tenant, id, n, fired)
	if err != nil {
		return nil, fmt.Errorf("job: schedule slots: %w", err)
	}
	defer rows.Close()
	var out []Slot
	for rows.Next() {
		var sl Slot
		if err := rows.Scan(&sl.Slot, &sl.Outcome, &sl.JobID, &sl.Status, &sl.NotBefore, &sl.RecordedAt); err != nil {
			return nil, fmt.Errorf("job: schedule slots: %w", err)
		}
		out = append(out, sl)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("job: schedule slots: %w", err)
	}
	return out, nil
}

// LastFire returns the latest fired slot of tenant's schedule id, or
// false when none fired.
func (s *Schedules) LastFire(ctx context.Context, tenant, id string) (Slot, bool, error) {
	sl, err := s.Slots(ctx, tenant, id, 1, true)
	if err != nil || len(sl) == 0 {
		return Slot{}, false, err
	}
	return sl[0], true, nil
}

// DefaultMinInterval is the shortest time a schedule's slots may be
// apart unless configured: a minute.
const DefaultMinInterval = time.Minute

// CheckDeclaration returns every problem of a schedule declared with
// expr or every in zone (ParseTiming): a bad timing, an interval below
// minInterval, an overlap or catch-up policy not known, a negative
// window or jitter, a body spec refuses. It returns the parsed timing
// when the timing is valid. spec nil means the task is not declared.
func CheckDeclaration(expr string, every time.Duration, zone string, r Recurring, spec *Spec, minInterval time.Duration, now time.Time) (Timing, []FieldError) {
	var errs []FieldError
	bad := func(field, format string, args ...any) {
		errs = append(errs, FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
	}
	tm, terr := ParseTiming(expr, every, zone)
	switch err := terr; {
	case err != nil:
		field := "cron"
		switch {
		case strings.Contains(err.Error(), "timezone"):
			field = "timezone"
		case every != 0 && expr == "":
			field = "every"
		}
		bad(field, "%v", err)
	case minInterval > 0:
		if d := tm.Shortest(now); d < minInterval {
			bad(map[bool]string{true: "every", false: "cron"}[tm.Every != 0], "fires %s apart, below the minimum interval of %s", d, minInterval)
		}
	}
	switch r.Overlap {
	case "", OverlapSkip, OverlapBufferOne, OverlapAllow:
	default:
		bad("overlap", "%q is not skip, buffer_one or allow", r.Overlap)
	}
	switch r.Catchup {
	case "", CatchupNone, CatchupOne, CatchupAll:
	default:
		bad("catchup", "%q is not none, one or all", r.Catchup)
	}
	if r.CatchupWindow < 0 {
		bad("catchup_window", "must be positive, not %s", r.CatchupWindow)
	}
	if (r.Catchup == CatchupOne || r.Catchup == CatchupAll) && r.CatchupWindow == 0 {
		bad("catchup_window", "required with catchup %s: how late a slot may still fire", r.Catchup)
	}
	if r.Jitter < 0 {
		bad("jitter", "must be positive, not %s", r.Jitter)
	}
	switch {
	case spec == nil:
		bad("task", "%q is not a declared job", r.Task)
	case len(r.Body) == 0:
		bad("body", "required: the payload of every fire")
	default:
		_, err := spec.Decode(r.Body)
		var pe *PayloadError
		switch {
		case errors.As(err, &pe):
			for _, f := range pe.Fields {
				bad(strings.TrimSuffix("body."+f.Field, "."), "%s", f.Message)
			}
		case err != nil:
			bad("body", "%v", err)
		}
	}
	if terr != nil {
		return Timing{}, errs
	}
	return tm, errs
}
