package workers

import (
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/job"
)

// BenchmarkFlowLimitBacklog is a new user's backlog under a flow limit:
// b.N jobs of 200ms each for one partner under `concurrency: 2`, one
// worker with 10 goroutines. The ideal is b.N×200ms/2; ideal-ratio is the
// run's time over it, and limited/job the ledger's limited rows per job
// (each a delivery sent back to the queue).
//
//	go test -run '^$' -bench BenchmarkFlowLimitBacklog -benchtime 200x ./workers/
func BenchmarkFlowLimitBacklog(b *testing.B) {
	const hold, slots = 200 * time.Millisecond, 2
	s, _, elapsed := runFlowLimited(b, hold, job.FlowLimit{Name: "ship-api", Concurrency: slots})
	var limited int
	if err := s.pool.QueryRow(b.Context(), `SELECT count(*) FROM job_attempts WHERE outcome = 'limited'`).Scan(&limited); err != nil {
		b.Fatal(err)
	}
	ideal := time.Duration(b.N) * hold / slots
	b.ReportMetric(elapsed.Seconds(), "s")
	b.ReportMetric(elapsed.Seconds()/ideal.Seconds(), "ideal-ratio")
	b.ReportMetric(float64(limited)/float64(b.N), "limited/job")
}

// BenchmarkFlowLimitRate: b.N instant jobs under `rate: 5/1s`, one
// worker with 10 goroutines. starts/s-max is the most calls the partner
// saw start within one second of its own clock: the limit allows 5.
//
//	go test -run '^$' -bench BenchmarkFlowLimitRate -benchtime 60x ./workers/
func BenchmarkFlowLimitRate(b *testing.B) {
	_, p, _ := runFlowLimited(b, 0, job.FlowLimit{Name: "ship-api", Rate: 5, Period: time.Second, Burst: 1})
	p.mu.Lock()
	starts := p.starts
	p.mu.Unlock()
	b.ReportMetric(float64(maxStartsWithin(starts, time.Second)), "starts/s-max")
}

// runFlowLimited runs b.N jobs for one partner that holds each call for
// hold, under limit keyed by tenant, through one worker with 10
// goroutines, and returns how long they took from the worker's start.
func runFlowLimited(b *testing.B, hold time.Duration, limit job.FlowLimit) (*serverEnv, *partner, time.Duration) {
	s := newServerEnv(b)
	p := &partner{hold: func(int) time.Duration { return hold }}
	srv := httptest.NewServer(p)
	b.Cleanup(srv.Close)
	use := limitUse(b, limit, "{tenant}")
	mux, err := NewHandlers().Mux(s.deps(NopObserver{}, 5*time.Second), []*job.Spec{partnerSpec(b, srv.URL, use)}, HTTPDelivery{})
	if err != nil {
		b.Fatal(err)
	}
	for i := range b.N {
		s.enqueue(b, partnerTask("acme", fmt.Sprintf("o-%04d", i)))
	}
	b.ResetTimer()
	start := time.Now()
	s.start(b, mux, Config{Concurrency: 10})
	testkit.Eventually(b, fmt.Sprintf("%d jobs succeeded", b.N), 5*time.Minute, func() bool {
		var done int
		if err := s.pool.QueryRow(b.Context(), `SELECT count(*) FROM job_executions WHERE status = 'succeeded'`).Scan(&done); err != nil {
			b.Fatal(err)
		}
		return done >= b.N
	})
	elapsed := time.Since(start)
	b.StopTimer()
	return s, p, elapsed
}
