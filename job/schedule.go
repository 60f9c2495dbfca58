package job

import (
	"errors"
	"fmt"
	"time"
)

// DefaultMaxDelay bounds how far ahead a request may schedule its job when
// the job sets no MaxDelay: 30 days.
const DefaultMaxDelay = 720 * time.Hour

// HeaderNotBefore is the task header that carries a scheduled job's
// not_before (RFC 3339, nanoseconds), so that a worker handed the task
// early knows how long to give it back for without reading the record.
const HeaderNotBefore = "not_before"

// ProcessAt is when a task due at notBefore is handed to asynq: notBefore
// rounded up to the whole second. asynq keeps a scheduled task's time in
// whole seconds, rounded down, and would hand it over up to a second
// early, only to be given back by the worker.
func ProcessAt(notBefore time.Time) time.Time {
	if t := notBefore.Truncate(time.Second); !t.Equal(notBefore) {
		return t.Add(time.Second)
	}
	return notBefore
}

// Schedule is when a request asks its job to run. The zero Schedule asks
// nothing, and the job's own Delay applies; ScheduleAfter(0) runs the job
// at once whatever its Delay.
type Schedule struct {
	after time.Duration
	at    time.Time
	set   bool
}

// ScheduleAfter runs the job d after it is recorded (Idemgate-Delay). The
// time is the database's: now() + d, computed once, in the insert.
func ScheduleAfter(d time.Duration) Schedule { return Schedule{after: d, set: true} }

// ScheduleAt runs the job at t (Idemgate-Not-Before); a t already past
// runs it at once.
func ScheduleAt(t time.Time) Schedule { return Schedule{at: t.UTC(), set: true} }

// IsZero reports whether the schedule asks nothing.
func (s Schedule) IsZero() bool { return !s.set }

// ErrScheduleOutOfRange: a request scheduled its job further ahead than
// the job's MaxDelay allows. Nothing was recorded.
var ErrScheduleOutOfRange = errors.New("job: schedule out of range")

// ScheduleError is a schedule beyond the job's MaxDelay: its message
// names the maximum, so that the client knows what it may ask.
type ScheduleError struct {
	Task string
	// Ahead is how far ahead the request asked; Max is the job's bound.
	Ahead, Max time.Duration
	// Debounced: the job is debounced, and its debounce alone says when
	// it runs, so a request may not schedule it.
	Debounced bool
}

func (e *ScheduleError) Error() string {
	if e.Debounced {
		return fmt.Sprintf("%s jobs are debounced: the debounce says when they run, so send no Idemgate-Delay or Idemgate-Not-Before", e.Task)
	}
	return fmt.Sprintf("the schedule is %s ahead; %s jobs may be scheduled at most %s ahead (max_delay)",
		e.Ahead.Round(time.Second), e.Task, e.Max)
}

// Is makes a *ScheduleError match ErrScheduleOutOfRange.
func (e *ScheduleError) Is(target error) bool { return target == ErrScheduleOutOfRange }

// maxDelay is the job's bound on a schedule, its default filled in.
func (s *Spec) maxDelay() time.Duration {
	if s.MaxDelay == 0 {
		return DefaultMaxDelay
	}
	return s.MaxDelay
}

// CheckSchedule checks sc against the job's MaxDelay, with now the
// caller's clock (a time given with Idemgate-Not-Before is that far
// ahead of it). A *ScheduleError, wrapping ErrScheduleOutOfRange, means
// the request must be refused.
func (s *Spec) CheckSchedule(sc Schedule, now time.Time) error {
	if s.Debounce != nil && sc.set {
		return &ScheduleError{Task: s.Task, Debounced: true}
	}
	sc = s.effective(sc)
	ahead := sc.after
	if !sc.at.IsZero() && sc.at.After(now) {
		// A time already past is due now: it is not measured, so no
		// distance to it is ever computed.
		ahead = sc.at.Sub(now)
	}
	if ahead > s.maxDelay() {
		return &ScheduleError{Task: s.Task, Ahead: ahead, Max: s.maxDelay()}
	}
	return nil
}

// effective is the schedule a request gets: its own, else the job's Delay.
func (s *Spec) effective(sc Schedule) Schedule {
	if sc.set {
		return sc
	}
	return Schedule{after: s.Delay, set: s.Delay > 0}
}

// NotBefore is the not_before a job of s requested with sc gets when it is
// recorded at now: nil when it runs at once. The jobs table computes it
// itself, on the database's clock; an in-memory stand-in of the job store
// (gatewaytest.Queue) uses this.
func (s *Spec) NotBefore(sc Schedule, now time.Time) *time.Time {
	sc = s.effective(sc)
	switch {
	case !sc.at.IsZero():
		t := sc.at
		return &t
	case sc.after > 0:
		t := now.Add(sc.after)
		return &t
	}
	return nil
}

// scheduleArgs are the insert's arguments for sc: the time given, or the
// delay in seconds for the database to add to its own now(). Both nil
// mean no schedule.
func scheduleArgs(sc Schedule) (at *time.Time, delaySecs *float64) {
	switch {
	case !sc.set:
	case !sc.at.IsZero():
		t := sc.at
		at = &t
	case sc.after > 0:
		secs := sc.after.Seconds()
		delaySecs = &secs
	}
	return at, delaySecs
}
