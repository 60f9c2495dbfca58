package job

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
)

// Scheduler defaults.
const (
	DefaultSchedulerInterval = time.Second
	DefaultScheduleGrace     = 15 * time.Second
	DefaultSlotHistory       = 30 * 24 * time.Hour
	// maxSlotsAtOnce bounds the slots of one schedule recorded in one
	// pass; older ones still due are counted missed without a row.
	maxSlotsAtOnce = 1000
	// maxDuePerPass bounds the schedules one pass handles.
	maxDuePerPass = 100
)

// electSQL takes the transaction-level advisory lock that elects the
// scheduler of one pass. Its key names the schema, so that deployments
// sharing a database in schemas of their own do not wait on each other.
const electSQL = `SELECT pg_try_advisory_xact_lock(hashtext('idemgate.scheduler:' || current_schema()))`

// SchedulerOptions adjust a Scheduler. The zero value takes every
// default.
type SchedulerOptions struct {
	// Interval is the time between two passes. Default
	// DefaultSchedulerInterval, 1s.
	Interval time.Duration
	// Grace is how late a slot may be found and still count as on time.
	// A later one is caught up or missed (Recurring.Catchup). Default
	// DefaultScheduleGrace, 15s.
	Grace time.Duration
	// History is how long a schedule's slot history is kept. Default
	// DefaultSlotHistory, 30 days.
	History time.Duration
	// Now is the clock slots are compared with. Default time.Now.
	Now func() time.Time
	// Missed, when set, is told of the slots of schedule (tenant/id)
	// recorded as missed.
	Missed func(schedule string, n int)
	// Logger gets a line for each pass that failed. Default
	// slog.Default().
	Logger *slog.Logger
}

func (o SchedulerOptions) withDefaults() SchedulerOptions {
	if o.Interval <= 0 {
		o.Interval = DefaultSchedulerInterval
	}
	if o.Grace <= 0 {
		o.Grace = DefaultScheduleGrace
	}
	if o.History <= 0 {
		o.History = DefaultSlotHistory
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// Scheduler fires the recurring schedules: each pass takes the schedules
// whose next slot has come, records each due slot (a job fired, or a
// skip with its reason) and moves next_fire_at past now, in one
// transaction, then sends the fired jobs' tasks. Any number of
// schedulers may run: a transaction-level advisory lock lets one pass
// run at a time, and a slot's job and history row derive from (tenant,
// schedule id, slot), so two passes over one slot meet on the same rows.
// A task lost after the commit is sent by the Relay, as for any job.
type Scheduler struct {
	sub   *Submitter
	db    beginner
	specs map[string]*Spec
	opts  SchedulerOptions
}

// NewScheduler returns a scheduler that records jobs on db and sends
// their tasks through sub. specs are the declared jobs: a schedule whose
// task is not among them is left to a scheduler that has it.
func NewScheduler(sub *Submitter, db DB, specs []*Spec, opts SchedulerOptions) (*Scheduler, error) {
	b, ok := db.(beginner)
	if !ok {
		return nil, errors.New("job: scheduler: the store cannot begin a transaction")
	}
	m := make(map[string]*Spec, len(specs))
	for _, s := range specs {
		m[s.Task] = s
	}
	return &Scheduler{sub: sub, db: b, specs: m, opts: opts.withDefaults()}, nil
}

// Run makes a pass at once and then every Interval until ctx ends, and
// returns nil then. A pass that fails is logged; the next one tries
// again.
func (s *Scheduler) Run(ctx context.Context) error {
	tick := time.NewTicker(s.opts.Interval)
	defer tick.Stop()
	for {
		if _, err := s.Pass(ctx); err != nil && ctx.Err() == nil {
			s.opts.Logger.WarnContext(ctx, "scheduler: pass failed; the next pass tries again", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// SchedulerPass is what one pass did.
type SchedulerPass struct {
	// Elected is false when another scheduler held the pass.
	Elected bool
	// Fired are the jobs the pass recorded.
	Fired []Row
	// Skipped counts the slots recorded as skipped, by outcome.
	Skipped map[SlotOutcome]int
}

// Pass handles the schedules due now, once.
func (s *Scheduler) Pass(ctx context.Context) (SchedulerPass, error) {
	now := s.opts.Now()
	p := SchedulerPass{Skipped: map[SlotOutcome]int{}}
	missed := map[string]int{}
	tasks := make([]string, 0, len(s.specs))
	for t := range s.specs {
		tasks = append(tasks, t)
	}
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		p = SchedulerPass{Skipped: map[SlotOutcome]int{}}
		clear(missed)
		if err := tx.QueryRow(ctx, electSQL).Scan(&p.Elected); err != nil {
			return err
		}
		if !p.Elected {
			return nil
		}
		due, err := (&Schedules{db: tx}).query(ctx, `SELECT `+recurringColumns+` FROM schedules
 WHERE next_fire_at <= $1 AND task = ANY($2) ORDER BY next_fire_at LIMIT $3 FOR UPDATE`, now, tasks, maxDuePerPass)
		if err != nil {
			return err
		}
		for _, r := range due {
			if err := s.handle(ctx, tx, r, now, &p, missed); err != nil {
				return fmt.Errorf("schedule %s/%s: %w", r.Tenant, r.ID, err)
			}
		}
		return nil
	})
	if err != nil {
		return SchedulerPass{}, fmt.Errorf("job: scheduler: %w", err)
	}
	for name, n := range missed {
		if s.opts.Missed != nil {
			s.opts.Missed(name, n)
		}
	}
	if err := s.sub.sendAll(ctx, p.Fired); err != nil {
		// Recorded: the relay sends what did not reach the queue.
		s.opts.Logger.WarnContext(ctx, "scheduler: a fired job's task is deferred to the relay", "err", err)
	}
	return p, nil
}

// handle records the due slots of r and moves its next_fire_at past now.
func (s *Scheduler) handle(ctx context.Context, tx pgx.Tx, r Recurring, now time.Time, p *SchedulerPass, missed map[string]int) error {
	var slots []time.Time
	dropped := 0
	for at := r.NextFireAt; !at.IsZero() && !at.After(now); at = r.Timing.Next(at) {
		if len(slots) == maxSlotsAtOnce {
			slots = slots[1:]
			dropped++
		}
		slots = append(slots, at)
	}
	outcomes := make([]SlotOutcome, len(slots))
	switch {
	case r.Paused:
		for i := range slots {
			outcomes[i] = SlotSkippedPaused
		}
		dropped = 0
	default:
		late := -1 // the latest late slot within the window
		caught := 0
		for i := len(slots) - 1; i >= 0; i-- {
			age := now.Sub(slots[i])
			switch {
			case age <= s.opts.Grace:
				outcomes[i] = SlotFired
			case r.Catchup == CatchupNone || age > r.CatchupWindow:
				outcomes[i] = SlotSkippedMissed
			case r.Catchup == CatchupOne && late < 0, r.Catchup == CatchupAll && caught < MaxCatchup:
				outcomes[i] = SlotFired
				late = i
				caught++
			default:
				outcomes[i] = SlotSkippedMissed
			}
		}
	}
	spec := s.specs[r.Task]
	var running int
	if r.Overlap != OverlapAllow {
		q := `SELECT count(*) FROM jobs WHERE tenant = $1 AND route = $2 AND status NOT IN ('succeeded', 'failed', 'cancelled')`
		if err := tx.QueryRow(ctx, q, r.Tenant, FireRoute(r.ID)).Scan(&running); err != nil {
			return err
		}
	}
	records := &Store{db: tx}
	batch := &pgx.Batch{}
	for i, slot := range slots {
		var jobID *string
		if outcomes[i] == SlotFired && (r.Overlap == OverlapSkip && running > 0 || r.Overlap == OverlapBufferOne && running > 1) {
			outcomes[i] = SlotSkippedOverlap
		}
		if outcomes[i] == SlotFired {
			rec, created, err := fireJob(ctx, records, s.sub.Shards, spec, r, slot, slotKey(slot))
			if err != nil {
				return err
			}
			if created {
				p.Fired = append(p.Fired, rec)
			}
			if !rec.Status.Final() {
				running++
			}
			jobID = &rec.ID
		}
		if outcomes[i] == SlotSkippedMissed {
			missed[r.Tenant+"/"+r.ID]++
		}
		if outcomes[i] != SlotFired {
			p.Skipped[outcomes[i]]++
		}
		batch.Queue(`INSERT INTO schedule_slots (tenant, schedule_id, slot, outcome, job_id) VALUES ($1, $2, $3, $4, $5)
ON CONFLICT DO NOTHING`, r.Tenant, r.ID, slot, outcomes[i], jobID)
	}
	if dropped > 0 {
		missed[r.Tenant+"/"+r.ID] += dropped
		p.Skipped[SlotSkippedMissed] += dropped
	}
	next := r.Timing.Next(now)
	batch.Queue(`UPDATE schedules SET next_fire_at = $3 WHERE tenant = $1 AND id = $2`, r.Tenant, r.ID, next)
	batch.Queue(`DELETE FROM schedule_slots WHERE tenant = $1 AND schedule_id = $2 AND slot < $3`, r.Tenant, r.ID, now.Add(-s.opts.History))
	return tx.SendBatch(ctx, batch).Close()
}

// fireJob records the job of r's slot, keyed by key, unless it exists,
// and returns it with whether this call created it. Its not_before is
// the slot plus the slot's jitter.
func fireJob(ctx context.Context, records *Store, shards int, spec *Spec, r Recurring, slot time.Time, key string) (Row, bool, error) {
	req := Request{Tenant: r.Tenant, Route: FireRoute(r.ID), Key: key, Spec: spec, Body: r.Body}
	if _, err := req.Decode(); err != nil {
		return Row{}, false, fmt.Errorf("the body no longer fits task %s: %w", r.Task, err)
	}
	return records.create(ctx, Row{
		ID: ID(r.Tenant, req.Route, key), Tenant: r.Tenant, Route: req.Route, IdempotencyKey: key,
		Task: spec.Task, Queue: ShardQueue(req.QueueName(), r.Tenant, shards), BusinessKey: fireKey(r.ID, key), Payload: r.Body,
	}, ScheduleAt(slot.Add(r.jitterOf(slot))))
}

// Trigger fires tenant's schedule id now, outside its slots, keyed by
// the request's idempotency key: the same key fires once. It sends the
// job's task as Submit does; ErrTaskDeferred comes with the recorded
// job when the queue did not take it.
func (e *Submitter) Trigger(ctx context.Context, specs map[string]*Spec, tenant, id, idemKey string) (Row, error) {
	r, err := NewSchedules(e.records.db).Get(ctx, tenant, id)
	if err != nil {
		return Row{}, err
	}
	spec, ok := specs[r.Task]
	if !ok {
		return Row{}, fmt.Errorf("job: trigger schedule %s: task %s is not declared", id, r.Task)
	}
	r.Jitter = 0
	rec, _, err := fireJob(ctx, e.records, e.Shards, spec, r, time.Now(), "trigger:"+idemKey)
	if err != nil {
		return Row{}, err
	}
	if rec.Status == StatusQueued || rec.Status == StatusScheduled {
		if err := e.enqueue(ctx, rec); err != nil {
			return rec, fmt.Errorf("%w: %w", ErrTaskDeferred, err)
		}
	}
	return rec, nil
}

// MaxBackfill is the most slots one backfill fires.
const MaxBackfill = 1000

// Backfill fires every slot of schedule id in [from, to], at most
// MaxBackfill, whatever overlap and catch-up say: a slot that fired
// already keeps its job, and one recorded as skipped fires now. With
// tenant "", the schedule is found by id alone. It returns the jobs of
// the slots in order, and sends the tasks of those it created.
func (e *Submitter) Backfill(ctx context.Context, specs map[string]*Spec, tenant, id string, from, to time.Time) ([]Row, error) {
	r, err := NewSchedules(e.records.db).Find(ctx, tenant, id)
	if err != nil {
		return nil, err
	}
	spec, ok := specs[r.Task]
	if !ok {
		return nil, fmt.Errorf("job: backfill schedule %s: task %s is not declared", id, r.Task)
	}
	begin, ok := e.records.db.(beginner)
	if !ok {
		return nil, errors.New("job: backfill: the store cannot begin a transaction")
	}
	var slots []time.Time
	for at := r.Timing.Next(from.Add(-time.Nanosecond)); !at.IsZero() && !at.After(to); at = r.Timing.Next(at) {
		if len(slots) == MaxBackfill {
			return nil, fmt.Errorf("%w: more than %d slots from %s to %s", ErrBackfillTooLong, MaxBackfill, from.Format(time.RFC3339), to.Format(time.RFC3339))
		}
		slots = append(slots, at)
	}
	var out, created []Row
	err = pgx.BeginFunc(ctx, begin, func(tx pgx.Tx) error {
		out, created = nil, nil
		records := &Store{db: tx}
		for _, slot := range slots {
			rec, isNew, err := fireJob(ctx, records, e.Shards, spec, r, slot, slotKey(slot))
			if err != nil {
				return err
			}
			out = append(out, rec)
			if isNew {
				created = append(created, rec)
			}
			_, err = tx.Exec(ctx, `INSERT INTO schedule_slots (tenant, schedule_id, slot, outcome, job_id) VALUES ($1, $2, $3, 'fired', $4)
ON CONFLICT (tenant, schedule_id, slot) DO UPDATE SET outcome = 'fired', job_id = EXCLUDED.job_id, recorded_at = now()
 WHERE schedule_slots.outcome <> 'fired'`, r.Tenant, r.ID, slot, rec.ID)
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("job: backfill: %w", err)
	}
	if err := e.sendAll(ctx, created); err != nil {
		return out, fmt.Errorf("%w: %w", ErrTaskDeferred, err)
	}
	return out, nil
}

// ErrBackfillTooLong: a backfill spans more than MaxBackfill slots.
var ErrBackfillTooLong = errors.New("job: backfill too long")
