package flowlimit

import (
	"testing"
	"time"
)

// TestIntervalSparesTheReceiver: Rate starts are spread over their Period
// and 50ms (a tenth of a Period under half a second), so Rate+1 starts
// never fit in one Period at a receiver whose view of them is up to that
// much late or early.
func TestIntervalSparesTheReceiver(t *testing.T) {
	for _, tc := range []struct {
		rule Rule
		want time.Duration
	}{
		{Rule{Rate: 5, Period: time.Second}, 210 * time.Millisecond},
		{Rule{Rate: 20, Period: time.Second}, 52500 * time.Microsecond},
		{Rule{Rate: 100, Period: time.Minute}, 600500 * time.Microsecond},
		{Rule{Rate: 5, Period: 100 * time.Millisecond}, 22 * time.Millisecond},
		{Rule{Concurrency: 2}, 0},
	} {
		if got := tc.rule.interval(); got != tc.want {
			t.Errorf("%d per %s: interval %s, want %s", tc.rule.Rate, tc.rule.Period, got, tc.want)
		}
		if tc.rule.Rate > 0 && time.Duration(tc.rule.Rate)*tc.rule.interval() <= tc.rule.Period {
			t.Errorf("%d per %s: %d intervals fit in one period", tc.rule.Rate, tc.rule.Period, tc.rule.Rate)
		}
	}
}
