package job

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// PauseKind is what a pause stops.
type PauseKind string

// The kinds of pause.
const (
	// PauseTask stops every job of one task.
	PauseTask PauseKind = "task"
	// PauseQueue stops every job of one queue.
	PauseQueue PauseKind = "queue"
	// PauseLimit stops the jobs whose flow limit renders one key value.
	PauseLimit PauseKind = "limit"
)

// BreakerActor is who a pause the breaker of a flow limit opened is by.
const BreakerActor = "breaker"

// PauseTarget names what a pause stops.
type PauseTarget struct {
	Kind PauseKind
	// Name is the task, the queue or the limit.
	Name string
	// Key is the limit's key value; "" for a task, a queue, or a limit
	// declared without a key.
	Key string
}

// String is how the target reads in a story and the audit trail:
// "task payment.charge", "queue critical", "limit ship-api key acme".
func (t PauseTarget) String() string {
	if t.Kind == PauseLimit {
		return "limit " + t.Name + " key " + strconv.Quote(t.Key)
	}
	return string(t.Kind) + " " + t.Name
}

// MaxPauseName bounds a target's name and key.
const MaxPauseName = 200

// Check refuses a target with an unknown kind, an empty or overlong name,
// or a key on anything but a limit.
func (t PauseTarget) Check() error {
	switch t.Kind {
	case PauseTask, PauseQueue, PauseLimit:
	default:
		return fmt.Errorf("pause: the target is a task, a queue or a limit, not %q", t.Kind)
	}
	switch {
	case t.Name == "":
		return fmt.Errorf("pause: the %s's name is empty", t.Kind)
	case len(t.Name) > MaxPauseName || len(t.Key) > MaxPauseName:
		return fmt.Errorf("pause: a name or key is at most %d bytes", MaxPauseName)
	case t.Key != "" && t.Kind != PauseLimit:
		return fmt.Errorf("pause: only a limit takes a key")
	}
	return nil
}

// Ramp is how a resume gives capacity back: Step of the work is admitted
// at the resume, Step more each Every after it, until all is. The zero
// Ramp gives everything back at once.
type Ramp struct {
	Step  float64
	Every time.Duration
}

// ParseRamp reads a ramp as "P%/duration": "10%/1m" admits a tenth of the
// work at once and a tenth more each minute. P is from 1 to 100.
func ParseRamp(s string) (Ramp, error) {
	pct, every, ok := strings.Cut(strings.TrimSpace(s), "/")
	p, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(pct), "%"), 64)
	if !ok || !strings.HasSuffix(strings.TrimSpace(pct), "%") || err != nil || p < 1 || p > 100 {
		return Ramp{}, fmt.Errorf("ramp %q is not P%%/duration with P from 1 to 100, like 10%%/1m", s)
	}
	d, err := time.ParseDuration(strings.TrimSpace(every))
	if err != nil || d < time.Second {
		return Ramp{}, fmt.Errorf("ramp %q: %q is not a duration of at least 1s", s, every)
	}
	return Ramp{Step: p / 100, Every: d}, nil
}

// String is the ramp as ParseRamp reads it, or "" for none.
func (r Ramp) String() string {
	if r.Step <= 0 {
		return ""
	}
	return strconv.FormatFloat(r.Step*100, 'f', -1, 64) + "%/" + shortDuration(r.Every)
}

// Length is how long after the resume the ramp admits everything.
func (r Ramp) Length() time.Duration {
	if r.Step <= 0 || r.Step >= 1 || r.Every <= 0 {
		return 0
	}
	return time.Duration(math.Ceil(1/r.Step)-1) * r.Every
}

// admitted is the share of the work the ramp admits elapsed after the
// resume.
func (r Ramp) admitted(elapsed time.Duration) float64 {
	if r.Step <= 0 || r.Every <= 0 || elapsed >= r.Length() {
		return 1
	}
	return min(1, r.Step*float64(1+elapsed/r.Every))
}

// ParseUntil reads when a pause ends: an RFC 3339 time, or a duration
// from now ("30m"). It must be ahead of now.
func ParseUntil(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		if d <= 0 {
			return time.Time{}, fmt.Errorf("until %q: a duration must be positive", s)
		}
		return now.Add(d), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("until %q is neither an RFC 3339 time (2026-01-02T15:04:05Z) nor a duration (30m)", s)
	}
	if !t.After(now) {
		return time.Time{}, fmt.Errorf("until %q is not in the future", s)
	}
	return t, nil
}

// Pause is one row of the pauses table.
type Pause struct {
	Target PauseTarget
	// Since is when the pause began.
	Since time.Time
	// Until is when it ends by itself; zero until resumed.
	Until time.Time
	// Resumed is when it was resumed with a ramp; zero while paused.
	Resumed time.Time
	Ramp    Ramp
	// By is who paused (an operator, or BreakerActor); Reason what they
	// gave.
	By, Reason string
}

// Admits is the share of the work the pause lets through at now: 0
// while paused, the ramp's share after a resume with a ramp, 1 once it
// has ended.
func (p Pause) Admits(now time.Time) float64 {
	switch {
	case !p.Resumed.IsZero():
		return p.Ramp.admitted(now.Sub(p.Resumed))
	case !p.Until.IsZero() && !now.Before(p.Until):
		return 1
	}
	return 0
}

// Story says why a delivery was sent back, for the attempt ledger and
// explain: "paused by task pause since 2026-12-07T05:00:00Z, by alice:
// partner outage".
func (p Pause) Story() string {
	var b strings.Builder
	b.WriteString("paused by " + string(p.Target.Kind) + " pause")
	if p.Target.Kind == PauseLimit {
		b.WriteString(" (" + p.Target.String() + ")")
	}
	b.WriteString(" since " + p.Since.UTC().Format(time.RFC3339))
	if !p.Until.IsZero() {
		b.WriteString(" until " + p.Until.UTC().Format(time.RFC3339))
	}
	if !p.Resumed.IsZero() && p.Ramp.Step > 0 {
		b.WriteString(", resuming at " + p.Ramp.String())
	}
	b.WriteString(", by " + p.By)
	if p.Reason != "" {
		b.WriteString(": " + p.Reason)
	}
	return b.String()
}

// ErrNotPaused: a resume named a target with no pause in force.
var ErrNotPaused = errors.New("job: not paused")

// PauseChannel is the channel a change of the pauses table NOTIFYs.
const PauseChannel = "idemgate_pauses"

// Pauses reads and writes the pauses table.
type Pauses struct{ db DB }

// NewPauses returns the pause store on db.
func NewPauses(db DB) *Pauses { return &Pauses{db: db} }

// pauseColumns are the columns a Pause is read from.
const pauseColumns = `kind, name, key, created_at, until, resumed_at, COALESCE(ramp_step, 0), COALESCE(ramp_every_ms, 0), created_by, reason`

// inForce selects the rows that still stop or slow work.
const inForce = `(resumed_at IS NULL AND (until IS NULL OR until > now()) OR ramp_until > now())`

func scanPause(row pgx.Row) (Pause, error) {
	var (
		p              Pause
		kind           string
		until, resumed *time.Time
		everyMs        int64
	)
	if err := row.Scan(&kind, &p.Target.Name, &p.Target.Key, &p.Since, &until, &resumed, &p.Ramp.Step, &everyMs, &p.By, &p.Reason); err != nil {
		return p, err
	}
	p.Target.Kind = PauseKind(kind)
	if until != nil {
		p.Until = *until
	}
	if resumed != nil {
		p.Resumed = *resumed
	}
	p.Ramp.Every = time.Duration(everyMs) * time.Millisecond
	return p, nil
}

// Pause pauses p.Target from now until p.Until (zero: until resumed),
// by p.By for p.Reason, replacing a pause of the same target. It returns
// the pause as recorded.
func (s *Pauses) Pause(ctx context.Context, p Pause) (Pause, error) {
	return s.pause(ctx, p, true)
}

// PauseIfNone is Pause, except that a pause of the same target in force
// stands: replaced reports whether p was recorded. A breaker opens this
// way, so that it never shortens an operator's pause.
func (s *Pauses) PauseIfNone(ctx context.Context, p Pause) (Pause, bool, error) {
	got, err := s.pause(ctx, p, false)
	if errors.Is(err, pgx.ErrNoRows) {
		return p, false, nil
	}
	return got, err == nil, err
}

func (s *Pauses) pause(ctx context.Context, p Pause, replace bool) (Pause, error) {
	if err := p.Target.Check(); err != nil {
		return p, err
	}
	if err := CheckReason(p.Reason); err != nil {
		return p, err
	}
	var until *time.Time
	if !p.Until.IsZero() {
		until = &p.Until
	}
	cond := ""
	if !replace {
		// The row conflicted with is pauses.*: in force, it stands.
		cond = ` WHERE NOT (pauses.resumed_at IS NULL AND (pauses.until IS NULL OR pauses.until > now()) OR pauses.ramp_until > now())`
	}
	row := s.db.QueryRow(ctx, `
INSERT INTO pauses (kind, name, key, until, created_by, reason) VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (tenant, kind, name, key) DO UPDATE
   SET created_at = now(), until = EXCLUDED.until, resumed_at = NULL, ramp_step = NULL, ramp_every_ms = NULL,
       ramp_until = NULL, created_by = EXCLUDED.created_by, reason = EXCLUDED.reason`+cond+`
RETURNING `+pauseColumns, string(p.Target.Kind), p.Target.Name, p.Target.Key, until, p.By, p.Reason)
	got, err := scanPause(row)
	if err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return p, err
		}
		return p, fmt.Errorf("job: pause %s: %w", p.Target, err)
	}
	return got, nil
}

// Resume ends the pause of t: at once with the zero Ramp, else gradually.
// It returns the pause as it stood, with its resume, or ErrNotPaused.
func (s *Pauses) Resume(ctx context.Context, t PauseTarget, ramp Ramp) (Pause, error) {
	if err := t.Check(); err != nil {
		return Pause{Target: t}, err
	}
	var (
		row pgx.Row
		key = []any{string(t.Kind), t.Name, t.Key}
	)
	if ramp.Length() == 0 {
		row = s.db.QueryRow(ctx, `DELETE FROM pauses WHERE tenant = '' AND kind = $1 AND name = $2 AND key = $3 AND `+inForce+`
RETURNING `+pauseColumns, key...)
	} else {
		row = s.db.QueryRow(ctx, `
UPDATE pauses SET resumed_at = now(), ramp_step = $4, ramp_every_ms = $5, ramp_until = now() + $6 * interval '1 millisecond'
 WHERE tenant = '' AND kind = $1 AND name = $2 AND key = $3 AND `+inForce+`
RETURNING `+pauseColumns, append(key, ramp.Step, ramp.Every.Milliseconds(), ramp.Length().Milliseconds())...)
	}
	p, err := scanPause(row)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return Pause{Target: t}, ErrNotPaused
	case err != nil:
		return Pause{Target: t}, fmt.Errorf("job: resume %s: %w", t, err)
	}
	if p.Resumed.IsZero() {
		p.Resumed = time.Now()
	}
	return p, nil
}

// InForce lists the pauses that still stop or slow work, oldest first.
// Rows that ended are deleted on the way.
func (s *Pauses) InForce(ctx context.Context) ([]Pause, error) {
	if _, err := s.db.Exec(ctx, `DELETE FROM pauses WHERE NOT `+inForce); err != nil {
		return nil, fmt.Errorf("job: pauses: %w", err)
	}
	return s.read(ctx)
}

// read lists the pauses in force without deleting the others: the
// workers' polls only read.
func (s *Pauses) read(ctx context.Context) ([]Pause, error) {
	rows, err := s.db.Query(ctx, `SELECT `+pauseColumns+` FROM pauses WHERE `+inForce+` ORDER BY created_at, kind, name, key`)
	if err != nil {
		return nil, fmt.Errorf("job: pauses: %w", err)
	}
	defer rows.Close()
	var out []Pause
	for rows.Next() {
		p, err := scanPause(rows)
		if err != nil {
			return nil, fmt.Errorf("job: pauses: %w", err)
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("job: pauses: %w", err)
	}
	return out, nil
}
