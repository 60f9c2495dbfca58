package workers

import (
	"cmp"
	"context"
	"sync"
	"time"
)

// Group commit for Job.CompleteTx. Each job's effect commits in a
// transaction of its own, and PostgreSQL shares one WAL flush among the
// commits that reach it while another flush is under way. Jobs that
// finish a few hundred microseconds apart each wait for a flush of their
// own: at a few hundred jobs a second a flush is over before the next
// commit arrives. So a job that has completed in its transaction waits
// here, briefly, for the other attempts of its task that are about to
// complete, and they all go on to commit at once: PostgreSQL then
// flushes their commits together.
//
// The wait never delays a lone job: it happens only while other attempts
// of the task are inside their business functions, ends as soon as every
// one of them is waiting here or has returned, and never lasts longer
// than gateMaxWait.

// gateMaxWait bounds a job's wait for its siblings: small next to what a
// job costs once several run at once.
const gateMaxWait = 2 * time.Millisecond

// gateMaxGroup is the largest group released together.
const gateMaxGroup = 64

// commitGate lines up the commits of one task's concurrent CompleteTx
// calls. The zero value is ready.
type commitGate struct {
	maxWait time.Duration // 0: gateMaxWait

	mu      sync.Mutex
	running int             // attempts inside their business function
	waiting []chan struct{} // attempts that completed and wait to commit
	timer   *time.Timer
}

// enter counts an attempt that is about to run its business function;
// the returned function, called when it has returned, uncounts it.
func (g *commitGate) enter() (leave func()) {
	g.mu.Lock()
	g.running++
	g.mu.Unlock()
	return func() {
		g.mu.Lock()
		g.running--
		if len(g.waiting) > 0 && g.running <= len(g.waiting) {
			g.releaseLocked() // nobody left who could join them
		}
		g.mu.Unlock()
	}
}

// wait holds an attempt that has completed in its transaction until the
// task's other running attempts have completed too, gateMaxWait has
// passed, or ctx ends.
func (g *commitGate) wait(ctx context.Context) {
	g.mu.Lock()
	if g.running-len(g.waiting) <= 1 {
		// Every other running attempt waits already (or there is none):
		// this one and they go now.
		g.releaseLocked()
		g.mu.Unlock()
		return
	}
	ch := make(chan struct{})
	g.waiting = append(g.waiting, ch)
	switch {
	case len(g.waiting) >= gateMaxGroup:
		g.releaseLocked()
	case len(g.waiting) == 1:
		g.timer = time.AfterFunc(cmp.Or(g.maxWait, gateMaxWait), g.release)
	}
	g.mu.Unlock()
	select {
	case <-ch:
	case <-ctx.Done():
	}
}

func (g *commitGate) release() {
	g.mu.Lock()
	g.releaseLocked()
	g.mu.Unlock()
}

// releaseLocked lets every waiting attempt go on to commit. g.mu is held.
func (g *commitGate) releaseLocked() {
	if g.timer != nil {
		g.timer.Stop()
		g.timer = nil
	}
	for _, ch := range g.waiting {
		close(ch)
	}
	g.waiting = nil
}
