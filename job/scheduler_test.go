package job_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/job"
)

const scheduleBody = `{"order_id":"o-1","amount_cents":100,"currency":"EUR"}`

// schedEnv is a store with one declared job, a test clock and the
// missed slots counted.
type schedEnv struct {
	env
	spec   *job.Spec
	store  *job.Schedules
	clock  *testkit.Clock
	mu     sync.Mutex
	missed map[string]int
}

func setupSchedules(t *testing.T, start time.Time) *schedEnv {
	t.Helper()
	v := setup(t)
	spec := invoiceSpec("invoice.create")
	spec.Queue = v.queue
	return &schedEnv{env: v, spec: spec, store: job.NewSchedules(v.pool), clock: testkit.NewClock(start), missed: map[string]int{}}
}

func (v *schedEnv) scheduler(t *testing.T, grace time.Duration) *job.Scheduler {
	t.Helper()
	s, err := job.NewScheduler(v.e, v.pool, []*job.Spec{v.spec}, job.SchedulerOptions{
		Now: v.clock.Now, Grace: grace, Interval: 20 * time.Millisecond, Logger: testkit.Logger(),
		Missed: func(name string, n int) { v.mu.Lock(); v.missed[name] += n; v.mu.Unlock() },
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (v *schedEnv) put(t *testing.T, r job.Recurring) job.Recurring {
	t.Helper()
	if r.Tenant == "" {
		r.Tenant = "acme"
	}
	r.Task, r.Body, r.Source = v.spec.Task, json.RawMessage(scheduleBody), job.SourceAPI
	got, _, err := v.store.Put(t.Context(), r, v.clock.Now(), 0)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// outcomes counts the recorded slots of schedule id by outcome.
func (v *schedEnv) outcomes(t *testing.T, id string) map[job.SlotOutcome]int {
	t.Helper()
	slots, err := v.store.Slots(t.Context(), "acme", id, 100000, false)
	if err != nil {
		t.Fatal(err)
	}
	out := map[job.SlotOutcome]int{}
	for _, s := range slots {
		out[s.Outcome]++
	}
	return out
}

func (v *schedEnv) fired(t *testing.T, id string) int {
	t.Helper()
	var n int
	if err := v.pool.QueryRow(t.Context(), `SELECT count(*) FROM jobs WHERE route = $1`, job.FireRoute(id)).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Two schedulers making passes at once, over 30 seconds of an every-2s
// schedule, record each slot once: one job per slot, keyed by it, with a
// business key of its own.
func TestSchedulersFireEachSlotOnce(t *testing.T) {
	start := time.Date(2026, 6, 1, 10, 0, 0, 0, time.UTC)
	v := setupSchedules(t, start)
	every := mustTiming(t, "", 2*time.Second, "")
	v.put(t, job.Recurring{ID: "tick", Timing: every, Overlap: job.OverlapAllow})
	a, b := v.scheduler(t, 5*time.Second), v.scheduler(t, 5*time.Second)
	for range 60 {
		v.clock.Add(500 * time.Millisecond)
		var wg sync.WaitGroup
		for _, s := range []*job.Scheduler{a, b} {
			wg.Go(func() {
				if _, err := s.Pass(t.Context()); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
	}
	if n := v.fired(t, "tick"); n != 15 {
		t.Fatalf("%d jobs fired, want 15 (one per slot of 30 s)", n)
	}
	slots, err := v.store.Slots(t.Context(), "acme", "tick", 100, false)
	if err != nil || len(slots) != 15 {
		t.Fatalf("%d slots (%v), want 15", len(slots), err)
	}
	keys := map[string]bool{}
	for _, s := range slots {
		if s.Outcome != job.SlotFired || s.JobID != job.FireID("acme", "tick", s.Slot) {
			t.Fatalf("slot %+v: want fired, its job keyed by the slot", s)
		}
		rec, err := v.e.Get(t.Context(), "acme", s.JobID)
		if err != nil {
			t.Fatal(err)
		}
		keys[rec.BusinessKey] = true
		if v.task(t, s.JobID) == nil {
			t.Fatalf("slot %s: no task", s.Slot)
		}
	}
	if len(keys) != 15 {
		t.Fatalf("%d business keys for 15 slots: each slot needs its own", len(keys))
	}
	r, err := v.store.Get(t.Context(), "acme", "tick")
	if err != nil || !r.NextFireAt.Equal(start.Add(32*time.Second)) {
		t.Fatalf("next_fire_at %v (%v), want %v", r.NextFireAt, err, start.Add(32*time.Second))
	}
}

// After 30 s of downtime, an every-2s schedule's late slots follow its
// catch-up policy: those within the window fire (the latest, or each),
// older ones are recorded missed and counted.
func TestSchedulerCatchup(t *testing.T) {
	for _, c := range []struct {
		catchup       job.Catchup
		fired, missed int
	}{
		// 15 slots due: 2 on time (within the 3 s grace), 9 late within
		// the 20 s window, 4 older.
		{job.CatchupNone, 2, 13},
		{job.CatchupOne, 3, 12},
		{job.CatchupAll, 11, 4},
	} {
		t.Run(string(c.catchup), func(t *testing.T) {
			start := time.Date(2026, 6, 1, 10, 0, 0, 0, time.UTC)
			v := setupSchedules(t, start)
			v.put(t, job.Recurring{ID: "sync", Timing: mustTiming(t, "", 2*time.Second, ""), Overlap: job.OverlapAllow,
				Catchup: c.catchup, CatchupWindow: 20 * time.Second})
			s := v.scheduler(t, 3*time.Second)
			v.clock.Add(30 * time.Second)
			if _, err := s.Pass(t.Context()); err != nil {
				t.Fatal(err)
			}
			got := v.outcomes(t, "sync")
			if got[job.SlotFired] != c.fired || got[job.SlotSkippedMissed] != c.missed || v.fired(t, "sync") != c.fired {
				t.Fatalf("outcomes %v, %d jobs; want %d fired, %d missed", got, v.fired(t, "sync"), c.fired, c.missed)
			}
			if v.missed["acme/sync"] != c.missed {
				t.Fatalf("missed counted %d, want %d", v.missed["acme/sync"], c.missed)
			}
		})
	}
}

// With overlap skip, a slot whose previous fire has not finished is
// skipped; a fire that failed does not block the next slot.
func TestSchedulerOverlapAndFailedSlot(t *testing.T) {
	start := time.Date(2026, 6, 1, 10, 0, 0, 0, time.UTC)
	v := setupSchedules(t, start)
	v.put(t, job.Recurring{ID: "nightly", Timing: mustTiming(t, "", time.Minute, ""), Overlap: job.OverlapSkip})
	s := v.scheduler(t, 5*time.Second)
	pass := func() job.SchedulerPass {
		t.Helper()
		p, err := s.Pass(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	v.clock.Add(time.Minute)
	first := pass()
	if len(first.Fired) != 1 {
		t.Fatalf("first slot: %+v", first)
	}
	v.clock.Add(time.Minute)
	if p := pass(); len(p.Fired) != 0 || p.Skipped[job.SlotSkippedOverlap] != 1 {
		t.Fatalf("second slot, the first still queued: %+v; want skipped (overlap)", p)
	}
	if err := v.e.Records().SetStatus(t.Context(), first.Fired[0].ID, job.StatusFailed, 3, "", "partner refused"); err != nil {
		t.Fatal(err)
	}
	v.clock.Add(time.Minute)
	if p := pass(); len(p.Fired) != 1 {
		t.Fatalf("third slot after a failed fire: %+v; want fired", p)
	}
	// Paused: slots are recorded skipped and next_fire_at keeps moving.
	if _, err := v.store.SetPaused(t.Context(), "acme", "nightly", true); err != nil {
		t.Fatal(err)
	}
	v.clock.Add(3 * time.Minute)
	if p := pass(); len(p.Fired) != 0 || p.Skipped[job.SlotSkippedPaused] != 3 {
		t.Fatalf("paused: %+v; want 3 slots skipped (paused)", p)
	}
	r, _ := v.store.Get(t.Context(), "acme", "nightly")
	if want := v.clock.Now().Add(time.Minute); !r.NextFireAt.Equal(want) {
		t.Fatalf("paused: next_fire_at %v, want %v", r.NextFireAt, want)
	}
	got := v.outcomes(t, "nightly")
	if got[job.SlotFired] != 2 || got[job.SlotSkippedOverlap] != 1 || got[job.SlotSkippedPaused] != 3 {
		t.Fatalf("history %v", got)
	}
}

// A backfill over slots that fired and slots that were skipped fires
// the skipped ones and keeps the fired ones' jobs.
func TestBackfillMeetsFiredSlots(t *testing.T) {
	start := time.Date(2026, 6, 1, 10, 0, 0, 0, time.UTC)
	v := setupSchedules(t, start)
	v.put(t, job.Recurring{ID: "hourly", Timing: mustTiming(t, "0 * * * *", 0, ""), Overlap: job.OverlapAllow})
	s := v.scheduler(t, 5*time.Second)
	v.clock.Add(time.Hour)
	p, err := s.Pass(t.Context())
	if err != nil || len(p.Fired) != 1 {
		t.Fatalf("%+v %v", p, err)
	}
	v.clock.Add(3 * time.Hour) // downtime: 3 slots missed
	if _, err := s.Pass(t.Context()); err != nil {
		t.Fatal(err)
	}
	specs := map[string]*job.Spec{v.spec.Task: v.spec}
	recs, err := v.e.Backfill(t.Context(), specs, "", "hourly", start.Add(time.Hour), start.Add(4*time.Hour))
	if err != nil || len(recs) != 4 {
		t.Fatalf("backfill: %d jobs, %v; want 4", len(recs), err)
	}
	if recs[0].ID != p.Fired[0].ID || !recs[0].CreatedAt.Equal(p.Fired[0].CreatedAt) {
		t.Fatalf("the slot that fired has a second job: %s, want %s", recs[0].ID, p.Fired[0].ID)
	}
	if n := v.fired(t, "hourly"); n != 4 {
		t.Fatalf("%d jobs, want 4", n)
	}
	if got := v.outcomes(t, "hourly"); got[job.SlotFired] != 4 {
		t.Fatalf("history %v, want 4 fired", got)
	}
	if again, err := v.e.Backfill(t.Context(), specs, "acme", "hourly", start.Add(time.Hour), start.Add(4*time.Hour)); err != nil || v.fired(t, "hourly") != 4 || again[2].ID != recs[2].ID {
		t.Fatalf("backfill again: %v, %d jobs", err, v.fired(t, "hourly"))
	}
}

// The scheduler crosses both of Paris's 2026 transitions: the daily
// 02:30 does not fire on 29 March (02:30 does not exist), and fires once
// on 25 October (02:30 exists twice).
func TestSchedulerAcrossDST(t *testing.T) {
	paris, _ := time.LoadLocation("Europe/Paris")
	for _, c := range []struct {
		name     string
		from, to time.Time
		want     []string
	}{
		{"spring forward", time.Date(2026, 3, 27, 12, 0, 0, 0, paris), time.Date(2026, 3, 31, 12, 0, 0, 0, paris),
			[]string{"2026-03-28 02:30 CET", "2026-03-30 02:30 CEST", "2026-03-31 02:30 CEST"}},
		{"fall back", time.Date(2026, 10, 24, 12, 0, 0, 0, paris), time.Date(2026, 10, 26, 12, 0, 0, 0, paris),
			[]string{"2026-10-25 02:30 CET", "2026-10-26 02:30 CET"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := setupSchedules(t, c.from)
			v.put(t, job.Recurring{ID: "settle", Timing: mustTiming(t, "30 2 * * *", 0, "Europe/Paris"), Overlap: job.OverlapAllow})
			s := v.scheduler(t, 10*time.Minute)
			for v.clock.Now().Before(c.to) {
				v.clock.Add(5 * time.Minute)
				if _, err := s.Pass(t.Context()); err != nil {
					t.Fatal(err)
				}
			}
			slots, err := v.store.Slots(t.Context(), "acme", "settle", 10, false)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for i := len(slots) - 1; i >= 0; i-- {
				if slots[i].Outcome != job.SlotFired {
					t.Fatalf("slot %+v", slots[i])
				}
				got = append(got, slots[i].Slot.In(paris).Format("2006-01-02 15:04 MST"))
			}
			if fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Fatalf("fired %v, want %v", got, c.want)
			}
		})
	}
}

// Run stops when its context ends.
func TestSchedulerRunStops(t *testing.T) {
	v := setupSchedules(t, time.Now())
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- v.scheduler(t, time.Second).Run(ctx) }()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
