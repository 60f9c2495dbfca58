package main

import (
	"math"
	"slices"
	"sync/atomic"
	"time"
)

// handlerTimes records how long each handler call took, from its start to
// its return (the effect and the job's completion included), into slots
// allocated before the clock starts: recording is one atomic add and one
// atomic store, no lock and no allocation, so that it changes what it
// measures by nanoseconds. Calls past the slots (retries beyond one a
// job) are not recorded.
type handlerTimes struct {
	next  atomic.Int64
	slots []int64 // nanoseconds
}

func newHandlerTimes(n int) *handlerTimes {
	return &handlerTimes{slots: make([]int64, n)}
}

// add records one call that started at start.
func (h *handlerTimes) add(start time.Time) {
	d := int64(time.Since(start))
	if i := h.next.Add(1) - 1; i < int64(len(h.slots)) {
		atomic.StoreInt64(&h.slots[i], d)
	}
}

// percentiles is the median and the 99th percentile of the recorded
// calls, in milliseconds; zeros when none was recorded.
func (h *handlerTimes) percentiles() (p50, p99 float64) {
	n := min(h.next.Load(), int64(len(h.slots)))
	ds := make([]int64, n)
	for i := range ds {
		ds[i] = atomic.LoadInt64(&h.slots[i])
	}
	slices.Sort(ds)
	return percentileMs(ds, 0.50), percentileMs(ds, 0.99)
}

// percentileMs is the nearest-rank q-quantile (0 < q <= 1) of sorted
// nanosecond durations, in milliseconds: the smallest value that at least
// q of them do not exceed. 0 for no values.
func percentileMs(sorted []int64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	// The tolerance keeps q*n that floating point puts just above an
	// integer (0.29*100) on that integer.
	rank := int(math.Ceil(q*float64(len(sorted)) - 1e-9))
	i := min(max(rank, 1), len(sorted)) - 1
	return float64(sorted[i]) / 1e6
}
