package lock_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
)

// BenchmarkAcquireRelease takes and releases locks on distinct resources
// from as many goroutines as a worker runs jobs, and reports the round
// trips one lock's Acquire and Release cost together. An op is one wave
// of callers.
func BenchmarkAcquireRelease(b *testing.B) {
	for _, callers := range []int{1, 10, 50} {
		b.Run(fmt.Sprint("callers=", callers), func(b *testing.B) {
			l, _, tr := countedLocker(b)
			var next atomic.Int64
			mark := tr.count()
			b.ReportAllocs()
			for b.Loop() {
				var wg sync.WaitGroup
				for range callers {
					wg.Go(func() {
						lease, err := l.Acquire(b.Context(), fmt.Sprint("order:", next.Add(1)))
						if err != nil {
							b.Error(err)
							return
						}
						if err := lease.Release(b.Context()); err != nil {
							b.Error(err)
						}
					})
				}
				wg.Wait()
			}
			b.ReportMetric(float64(tr.count()-mark)/float64(b.N*callers), "trips/lock")
		})
	}
}
