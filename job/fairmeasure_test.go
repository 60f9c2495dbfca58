package job

import (
	"testing"
	"time"
)

// The p99 bound is the top of the bucket where the counts reach 99% of
// the dwell counted; above the last bucket it is -1.
func TestFairDwellQuantile(t *testing.T) {
	for _, tc := range []struct {
		name string
		le   map[string]int64
		n    int64
		want time.Duration
	}{
		{"all in one bucket", map[string]int64{"100": 10}, 10, 100 * time.Millisecond},
		{"one slow job of a hundred", map[string]int64{"5": 99, "2500": 1}, 100, 5 * time.Millisecond},
		{"two slow jobs of a hundred", map[string]int64{"5": 98, "2500": 2}, 100, 2500 * time.Millisecond},
		{"above the last bucket", map[string]int64{"5": 90, "inf": 10}, 100, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := dwellQuantile(tc.le, tc.n, 0.99); got != tc.want {
				t.Errorf("p99 bound %v, want %v", got, tc.want)
			}
		})
	}
}
