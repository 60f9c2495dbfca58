package job

import (
	"errors"
	"fmt"
	"math/bits"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// Timing is when a recurring schedule fires: a standard five-field cron
// expression read in an IANA zone, or a fixed interval. Its slots are
// the nominal fire times.
type Timing struct {
	// Cron is the cron expression (minute hour day-of-month month
	// day-of-week); empty for an interval.
	Cron string
	// Every is the interval; 0 for a cron expression.
	Every time.Duration
	// Zone is where Cron is read. UTC when nil.
	Zone *time.Location
	spec *cron.SpecSchedule
}

// cronParser reads the standard five fields and the @daily family of
// descriptors.
var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// maxSearch bounds how far ahead Next looks for a cron slot.
const maxSearch = 5 * 366 * 24 * time.Hour

// ParseTiming reads a schedule's timing: exactly one of expr and every,
// and zone, an IANA name ("" is UTC). An interval is whole seconds.
func ParseTiming(expr string, every time.Duration, zone string) (Timing, error) {
	loc := time.UTC
	if zone != "" {
		l, err := time.LoadLocation(zone)
		if err != nil || zone == "Local" {
			return Timing{}, fmt.Errorf("timezone %q is not an IANA zone name", zone)
		}
		loc = l
	}
	switch {
	case expr != "" && every != 0:
		return Timing{}, errors.New("cron and every are exclusive: give one")
	case expr == "" && every == 0:
		return Timing{}, errors.New("give cron or every")
	case every != 0:
		if every < time.Second || every%time.Second != 0 {
			return Timing{}, fmt.Errorf("every %s: whole seconds, at least 1s", every)
		}
		return Timing{Every: every, Zone: loc}, nil
	}
	if strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ=") {
		return Timing{}, fmt.Errorf("cron %q: name the zone in timezone, not in the expression", expr)
	}
	if strings.HasPrefix(expr, "@every") {
		return Timing{}, fmt.Errorf("cron %q: write an interval as every", expr)
	}
	s, err := cronParser.Parse(expr)
	if err != nil {
		return Timing{}, fmt.Errorf("cron %q: %w", expr, err)
	}
	spec, ok := s.(*cron.SpecSchedule)
	if !ok {
		return Timing{}, fmt.Errorf("cron %q: not a standard five-field expression", expr)
	}
	t := Timing{Cron: expr, Zone: loc, spec: spec}
	if t.Next(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)).IsZero() {
		return Timing{}, fmt.Errorf("cron %q never fires", expr)
	}
	return t, nil
}

// String is the timing as the schedules table keeps it: the cron
// expression, or "@every" and the interval.
func (t Timing) String() string {
	if t.Every != 0 {
		return "@every " + t.Every.String()
	}
	return t.Cron
}

// ParseStoredTiming reads what String wrote.
func ParseStoredTiming(spec, zone string) (Timing, error) {
	if d, ok := strings.CutPrefix(spec, "@every "); ok {
		every, err := time.ParseDuration(d)
		if err != nil {
			return Timing{}, fmt.Errorf("every %q: %w", d, err)
		}
		return ParseTiming("", every, zone)
	}
	return ParseTiming(spec, 0, zone)
}

// Next is the first slot strictly after after, or the zero time when
// none comes within five years. An interval's slots are the multiples of
// it since the Unix epoch. A cron slot is a wall-clock time in Zone: one
// that does not exist there (a spring-forward gap) is no slot, and one
// that exists twice (a fall-back overlap) is one slot, at the instant
// time.Date gives it (the second, standard-time one, today).
func (t Timing) Next(after time.Time) time.Time {
	if t.Every != 0 {
		n := after.UnixNano() / int64(t.Every)
		if after.UnixNano() < 0 && after.UnixNano()%int64(t.Every) != 0 {
			n--
		}
		return time.Unix(0, (n+1)*int64(t.Every)).UTC()
	}
	loc := t.Zone
	if loc == nil {
		loc = time.UTC
	}
	local := after.In(loc)
	day := time.Date(local.Year(), local.Month(), local.Day(), 12, 0, 0, 0, loc)
	for range int(maxSearch / (24 * time.Hour)) {
		if t.dayMatches(day) {
			for h := range 24 {
				if t.spec.Hour&(1<<uint(h)) == 0 {
					continue
				}
				for m := range 60 {
					if t.spec.Minute&(1<<uint(m)) == 0 {
						continue
					}
					at := time.Date(day.Year(), day.Month(), day.Day(), h, m, 0, 0, loc)
					if at.Hour() != h || at.Minute() != m {
						continue // the wall-clock time does not exist in loc
					}
					if at.After(after) {
						return at.UTC()
					}
				}
			}
		}
		day = time.Date(day.Year(), day.Month(), day.Day()+1, 12, 0, 0, 0, loc)
	}
	return time.Time{}
}

// dayMatches is cron's rule: with both day fields restricted, either
// may match.
func (t Timing) dayMatches(day time.Time) bool {
	const star = 1 << 63
	s := t.spec
	if s.Month&(1<<uint(day.Month())) == 0 {
		return false
	}
	dom := s.Dom&(1<<uint(day.Day())) != 0
	dow := s.Dow&(1<<uint(day.Weekday())) != 0
	if s.Dom&star != 0 || s.Dow&star != 0 {
		return dom && dow
	}
	return dom || dow
}

// NextN is the n slots after after.
func (t Timing) NextN(after time.Time, n int) []time.Time {
	out := make([]time.Time, 0, n)
	for range n {
		after = t.Next(after)
		if after.IsZero() {
			break
		}
		out = append(out, after)
	}
	return out
}

// Shortest is the shortest time between two slots: the interval, or for
// a cron expression the least gap over its slots in the year after from.
func (t Timing) Shortest(from time.Time) time.Duration {
	if t.Every != 0 {
		return t.Every
	}
	if bits.OnesCount64(t.spec.Minute) > 1 || bits.OnesCount64(t.spec.Hour&^(1<<63)) > 1 {
		// Several slots a day: the least gap shows within a few days.
		var least time.Duration
		prev := t.Next(from)
		for range 3000 {
			next := t.Next(prev)
			if next.IsZero() {
				break
			}
			if d := next.Sub(prev); least == 0 || d < least {
				least = d
			}
			prev = next
		}
		return least
	}
	least := time.Duration(0)
	prev := t.Next(from)
	for prev.Before(from.Add(366 * 24 * time.Hour)) {
		next := t.Next(prev)
		if next.IsZero() {
			break
		}
		if d := next.Sub(prev); least == 0 || d < least {
			least = d
		}
		prev = next
	}
	return least
}
