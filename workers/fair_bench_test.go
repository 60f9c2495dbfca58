package workers

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/idemgate/idemgate/job"
)

// fairModes are the two ways a benchmark runs: jobs through a fairness
// pool, and straight to asynq as without one.
var fairModes = []struct {
	name   string
	on     bool
	window int
}{{"off", false, 64}, {"on", true, 64}, {"on-window256", true, 256}}

// runMode starts the workers with h, and the dispatchers when on.
func (e *fairEnv) runMode(b *testing.B, h asynq.Handler, cfg Config, on bool) {
	if on {
		e.run(b, h, cfg)
		return
	}
	e.sub.Fairness = nil
	e.start(b, h, cfg)
}

// BenchmarkFairLoneTenant: one tenant's jobs through the workers, with
// and without a fairness pool, run by a no-op asynq handler (the pool's
// own cost laid bare) and by an idempotent handler (workers.Handle, with
// its lock, execution state and job document, around a no-op business
// function: what a job costs in idemgate). One op is one job, from the
// first start to the last; jobs/s is the throughput.
//
//	go test -run '^$' -bench BenchmarkFairLoneTenant -benchtime 3000x ./workers/
func BenchmarkFairLoneTenant(b *testing.B) {
	for _, handler := range []string{"noop", "idempotent"} {
		for _, mode := range fairModes {
			b.Run(handler+"/"+mode.name, func(b *testing.B) {
				e := newFairEnv(b, job.FairPool{Name: "tenants", Window: mode.window})
				if !mode.on {
					e.sub.Fairness = nil
				}
				var h asynq.Handler = e.recorder()
				if handler == "idempotent" {
					deps := e.deps(nil, 30*time.Second)
					deps.Jobs = job.NewStore(e.pool)
					h = Handle(deps, fairTask, orderKey, orderResource, func(_ context.Context, j Job[order]) (string, error) {
						e.started.add(j.Tenant, "")
						return "", nil
					})
				}
				e.submit(b, e.spec, "acme", "a", b.N)
				b.ResetTimer()
				start := time.Now()
				e.runMode(b, h, Config{Concurrency: 16}, mode.on)
				for e.started.len() < b.N {
					time.Sleep(time.Millisecond)
				}
				b.StopTimer()
				b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "jobs/s")
			})
		}
	}
}

// BenchmarkFairLightDwell: a heavy tenant has 3,000 jobs waiting for
// workers that run 800 a second at most (5ms each, 4 at once) when a
// light tenant submits 20; the light tenant's dwell (submit to start) p99
// and p50, with and without a fairness pool.
//
//	go test -run '^$' -bench BenchmarkFairLightDwell -benchtime 1x ./workers/
func BenchmarkFairLightDwell(b *testing.B) {
	for _, mode := range fairModes {
		b.Run(mode.name, func(b *testing.B) {
			for range b.N {
				e := newFairEnv(b, job.FairPool{Name: "tenants", Window: mode.window})
				if !mode.on {
					e.sub.Fairness = nil
				}
				var mu sync.Mutex
				submitted, dwell := map[string]time.Time{}, []time.Duration{}
				h := asynq.HandlerFunc(func(_ context.Context, task *asynq.Task) error {
					if task.Headers()[job.HeaderTenant] == "light" {
						mu.Lock()
						dwell = append(dwell, time.Since(submitted[task.Headers()[job.HeaderID]]))
						mu.Unlock()
					}
					e.started.add(task.Headers()[job.HeaderTenant], "")
					time.Sleep(5 * time.Millisecond)
					return nil
				})
				// The flood is in before the workers start, so that the
				// backlog is there however fast the machine submits.
				e.submit(b, e.spec, "heavy", "h", 3000)
				e.runMode(b, h, Config{Concurrency: 4}, mode.on)
				for i := range 20 {
					key := fmt.Sprintf("l-%d", i)
					mu.Lock()
					submitted[job.ID("light", "fair", key+"-0")] = time.Now()
					mu.Unlock()
					e.submit(b, e.spec, "light", key, 1)
				}
				for {
					mu.Lock()
					n := len(dwell)
					mu.Unlock()
					if n == 20 {
						break
					}
					time.Sleep(5 * time.Millisecond)
				}
				slices.Sort(dwell)
				b.ReportMetric(float64(dwell[len(dwell)-1].Milliseconds()), "light-p99-ms")
				b.ReportMetric(float64(dwell[len(dwell)/2].Milliseconds()), "light-p50-ms")
			}
		})
	}
}
