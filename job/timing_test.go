package job_test

import (
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/job"
)

func mustTiming(t *testing.T, expr string, every time.Duration, zone string) job.Timing {
	t.Helper()
	tm, err := job.ParseTiming(expr, every, zone)
	if err != nil {
		t.Fatal(err)
	}
	return tm
}

// A local time that does not exist (Paris, 2026-03-29, 02:00-03:00) is no
// slot: the daily 02:30 does not fire that day. One that exists twice
// (2026-10-25, 02:00-03:00 twice) fires once.
func TestTimingAcrossDST(t *testing.T) {
	t.Parallel()
	paris, _ := time.LoadLocation("Europe/Paris")
	daily := mustTiming(t, "30 2 * * *", 0, "Europe/Paris")
	got := daily.NextN(time.Date(2026, 3, 27, 12, 0, 0, 0, paris), 3)
	want := []time.Time{
		time.Date(2026, 3, 28, 2, 30, 0, 0, paris),
		time.Date(2026, 3, 30, 2, 30, 0, 0, paris), // no 29th: 02:30 does not exist
		time.Date(2026, 3, 31, 2, 30, 0, 0, paris),
	}
	for i := range want {
		if i >= len(got) || !got[i].Equal(want[i]) {
			t.Fatalf("spring forward: %v, want %v", got, want)
		}
	}
	got = daily.NextN(time.Date(2026, 10, 24, 12, 0, 0, 0, paris), 3)
	if len(got) != 3 || got[0].In(paris).Day() != 25 || got[1].In(paris).Day() != 26 || got[2].In(paris).Day() != 27 {
		t.Fatalf("fall back: %v: want one fire on each of the 25th, 26th and 27th", got)
	}
	// Every 30 minutes through the night the clocks go back: 02:00 and
	// 02:30 exist twice, and fire once each.
	half := mustTiming(t, "*/30 * * * *", 0, "Europe/Paris")
	from := time.Date(2026, 10, 25, 0, 45, 0, 0, time.UTC) // 02:45 CEST
	var locals []string
	for _, s := range half.NextN(from.Add(-2*time.Hour), 8) {
		locals = append(locals, s.In(paris).Format("15:04"))
	}
	if strings.Join(locals, " ") != "01:00 01:30 02:00 02:30 03:00 03:30 04:00 04:30" {
		t.Fatalf("fall back, every 30 min: %v: want each local time once", locals)
	}
	// In UTC nothing is skipped: 02:30 UTC fires every day.
	utc := mustTiming(t, "30 2 * * *", 0, "")
	if s := utc.NextN(time.Date(2026, 3, 28, 12, 0, 0, 0, time.UTC), 1); !s[0].Equal(time.Date(2026, 3, 29, 2, 30, 0, 0, time.UTC)) {
		t.Fatalf("utc: %v", s)
	}
}

// An interval's slots are multiples of it since the epoch, so that every
// scheduler names the same slots.
func TestTimingEvery(t *testing.T) {
	t.Parallel()
	tm := mustTiming(t, "", 15*time.Minute, "Europe/Paris")
	got := tm.Next(time.Date(2026, 5, 1, 10, 7, 3, 0, time.UTC))
	if !got.Equal(time.Date(2026, 5, 1, 10, 15, 0, 0, time.UTC)) {
		t.Fatalf("next %v", got)
	}
	if again := tm.Next(got); !again.Equal(got.Add(15 * time.Minute)) {
		t.Fatalf("after a slot: %v", again)
	}
	stored, err := job.ParseStoredTiming(tm.String(), "Europe/Paris")
	if err != nil || stored.Every != 15*time.Minute {
		t.Fatalf("stored %q: %+v %v", tm.String(), stored, err)
	}
}

func TestTimingRefusals(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, expr string
		every      time.Duration
		zone, want string
	}{
		{"bad cron", "61 * * * *", 0, "", "cron"},
		{"six fields", "0 0 2 * * *", 0, "", "cron"},
		{"unknown zone", "0 2 * * *", 0, "Europe/Atlantis", "IANA"},
		{"both", "0 2 * * *", time.Minute, "", "exclusive"},
		{"neither", "", 0, "", "give cron or every"},
		{"never", "0 0 30 2 *", 0, "", "never fires"},
		{"zone in the expression", "CRON_TZ=UTC 0 2 * * *", 0, "", "timezone"},
		{"sub-second", "", 1500 * time.Millisecond, "", "whole seconds"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := job.ParseTiming(c.expr, c.every, c.zone)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("%v: want an error saying %q", err, c.want)
			}
		})
	}
}

func TestTimingShortest(t *testing.T) {
	t.Parallel()
	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for expr, want := range map[string]time.Duration{
		"* * * * *":   time.Minute,
		"*/5 * * * *": 5 * time.Minute,
		"0 2 * * *":   24 * time.Hour,
		"0,1 3 * * *": time.Minute,
		"0 9 * * 1-5": 24 * time.Hour,
		"0 0 1 * *":   28 * 24 * time.Hour,
		"0 */6 * * *": 6 * time.Hour,
	} {
		if got := mustTiming(t, expr, 0, "").Shortest(from); got != want {
			t.Errorf("%s: shortest %s, want %s", expr, got, want)
		}
	}
}
