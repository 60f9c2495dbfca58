package main

import (
	"testing"
	"time"
)

func TestPercentileMs(t *testing.T) {
	ms := func(vs ...int64) []int64 {
		for i := range vs {
			vs[i] *= int64(time.Millisecond)
		}
		return vs
	}
	hundred := make([]int64, 100)
	for i := range hundred {
		hundred[i] = int64(i+1) * int64(time.Millisecond) // 1..100 ms
	}
	for _, c := range []struct {
		name   string
		sorted []int64
		q      float64
		want   float64
	}{
		{"none", nil, 0.99, 0},
		{"one", ms(7), 0.5, 7},
		{"one p99", ms(7), 0.99, 7},
		{"median of four is the second", ms(1, 2, 3, 4), 0.5, 2},
		{"median of five", ms(1, 2, 3, 4, 50), 0.5, 3},
		{"p99 of 100 is the 99th", hundred, 0.99, 99},
		{"p50 of 100 is the 50th", hundred, 0.5, 50},
		{"p29 of 100 stays on the 29th", hundred, 0.29, 29},
		{"p99 of ten is the largest", ms(1, 1, 1, 1, 1, 1, 1, 1, 1, 40), 0.99, 40},
	} {
		if got := percentileMs(c.sorted, c.q); got != c.want {
			t.Errorf("%s: percentileMs(q=%v) = %v ms, want %v", c.name, c.q, got, c.want)
		}
	}
}

// TestHandlerTimesKeepsTheFirstSlots checks that calls past the slots
// allocated for the jobs are dropped rather than grown into, and that the
// percentiles are of the recorded calls.
func TestHandlerTimesKeepsTheFirstSlots(t *testing.T) {
	h := newHandlerTimes(3)
	for range 5 {
		h.add(time.Now().Add(-2 * time.Millisecond))
	}
	if len(h.slots) != 3 {
		t.Fatalf("slots grew to %d, want 3", len(h.slots))
	}
	p50, p99 := h.percentiles()
	if p50 < 2 || p99 < p50 {
		t.Errorf("percentiles = %v, %v ms; want p50 >= 2 ms and p99 >= p50", p50, p99)
	}
	if p50, p99 := newHandlerTimes(10).percentiles(); p50 != 0 || p99 != 0 {
		t.Errorf("no calls: percentiles = %v, %v; want 0, 0", p50, p99)
	}
}
