package redisstore

// Scripts of concurrent requests share one round trip, not a transaction.
// Design: docs/design/batching.md compares this batcher with the other two.

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Pipelining. Every request runs two scripts (claim, then complete), each a
// write and a read syscall on both sides of the connection. Scripts that
// arrive while others are on the wire are sent together, as one pipeline:
// one write, one read, and one pass of Redis's event loop for many. Each
// script stays atomic on its own; a pipeline is not a transaction and needs
// none. Nobody waits for a pipeline to fill: a script that finds a pipeline
// slot free starts a sender, which sends it at once, and scripts that queue
// behind busy pipelines go out together when one returns.
//
// A caller waits for its reply or for its context, whichever ends first
// (see roundtrip.go). A script whose caller has given up while it was
// queued is dropped, never sent. A pipeline waits for a pool connection
// under a context that ends when every one of its callers has given up, so
// that go-redis stops waiting for nobody; once a connection is found, the
// client's read and write timeouts bound the pipeline on the wire. A
// script whose caller gives up during that wait for a connection still
// goes out if another caller of its pipeline still waits: go-redis takes
// the connection and writes in one call, leaving no point to drop it at.
const (
	defaultPipelines   = 2
	defaultMaxPipeline = 64
)

// WithPipelining sets how many pipelines may be on the wire at once and how
// many scripts one may carry. pipelines 0 turns pipelining off: every
// script is its own round trip.
func WithPipelining(pipelines, max int) Option {
	return func(s *Store) { s.pipelines, s.maxPipeline = pipelines, max }
}

// call is one script waiting for a pipeline.
type call struct {
	ctx    context.Context // the caller's: the script is sent only while it is live
	script *redis.Script
	keys   []string
	args   []any
	wait   bool // the change waits for replicas when the store does (wait.go)
	cmd    *redis.Cmd
	done   chan struct{} // closed when cmd holds the reply
}

// hot runs one of the scripts every request runs: through the pipeliner
// when pipelining is on, else as a round trip of its own. waited says
// whether the change waits for replicas when the store does (wait.go).
func (s *Store) hot(ctx context.Context, script *redis.Script, waited bool, keys []string, args ...any) *redis.Cmd {
	if s.pipe != nil {
		if err := ctx.Err(); err != nil {
			return failedCmd(ctx, err)
		}
		return s.pipe.run(ctx, script, waited, keys, args...)
	}
	cmd, err := roundTrip(ctx, &s.flights, func(ctx context.Context) (*redis.Cmd, error) {
		return s.run(ctx, script, waited, keys, args...), nil
	})
	if err != nil {
		return failedCmd(ctx, err)
	}
	return cmd
}

// failedCmd is a reply that never came: err, as a command's error.
func failedCmd(ctx context.Context, err error) *redis.Cmd {
	cmd := redis.NewCmd(ctx)
	cmd.SetErr(err)
	return cmd
}

type pipeliner struct {
	client  redis.UniversalClient
	max     int
	slots   int
	flights *flights // runs the senders
	wait    waitFor  // WithWait's: a batch's WAIT (wait.go)

	mu      sync.Mutex
	queue   []*call
	sending int // senders running, each with at most one pipeline on the wire

	// What went out: scripts, the round trips that carried them, and the
	// WAITs among those.
	scripts, trips, waits atomic.Int64
}

// run sends script and returns its reply, or ctx's error as soon as ctx
// ends.
func (p *pipeliner) run(ctx context.Context, script *redis.Script, waited bool, keys []string, args ...any) *redis.Cmd {
	c := &call{ctx: ctx, script: script, keys: keys, args: args, wait: waited, done: make(chan struct{})}
	p.mu.Lock()
	p.queue = append(p.queue, c)
	start := p.sending < p.slots
	if start {
		p.sending++
	}
	p.mu.Unlock()
	if start {
		p.flights.start(p.send)
	}
	select {
	case <-c.done:
		return c.cmd
	case <-ctx.Done():
		select {
		case <-c.done: // the reply came with the deadline: it stands
			return c.cmd
		default:
			// Still queued, the script is dropped (take); on the
			// wire, its reply goes unread.
			return failedCmd(ctx, ctx.Err())
		}
	}
}

// send sends pipelines until the queue is empty, then frees its slot.
func (p *pipeliner) send() {
	for {
		batch := p.take()
		if batch == nil {
			return
		}
		p.exec(batch)
	}
}

// take removes up to max scripts from the queue, dropping those whose
// caller has given up, and returns them. When none is left it frees the
// sender's slot and returns nil.
func (p *pipeliner) take() []*call {
	p.mu.Lock()
	defer p.mu.Unlock()
	var batch []*call
	for len(p.queue) > 0 && len(batch) < p.max {
		c := p.queue[0]
		p.queue[0] = nil
		p.queue = p.queue[1:]
		if c.ctx.Err() != nil {
			continue // its caller returned ctx's error: it never runs
		}
		batch = append(batch, c)
	}
	if len(batch) == 0 {
		p.sending--
		return nil
	}
	return batch
}

// exec runs batch and fills every call's cmd.
func (p *pipeliner) exec(batch []*call) {
	ctx, stop := callersContext(batch)
	defer stop()
	p.trips.Add(1)
	p.scripts.Add(int64(len(batch)))
	if p.wait.on() && slices.ContainsFunc(batch, func(c *call) bool { return c.wait }) {
		// One WAIT after the batch covers every script in it.
		p.waits.Add(1)
		execWaited(ctx, p.client, p.wait, batch)
		for _, c := range batch {
			close(c.done)
		}
		return
	}
	if len(batch) == 1 {
		c := batch[0]
		c.cmd = c.script.Run(ctx, p.client, c.keys, c.args...)
		close(c.done)
		return
	}
	pipe := p.client.Pipeline()
	for _, c := range batch {
		c.cmd = c.script.EvalSha(ctx, pipe, c.keys, c.args...)
	}
	_, _ = pipe.Exec(ctx) // each cmd carries its own error
	for _, c := range batch {
		if err := c.cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			// The script is not loaded on that node (a restart, a new
			// node, SCRIPT FLUSH), so it did not run: Run loads and runs
			// it, unless its caller has given up meanwhile.
			c.cmd = c.script.Run(c.ctx, p.client, c.keys, c.args...)
		}
		close(c.done)
	}
}

// callersContext is the context a pipeline runs under: a pipeline of one
// runs under its caller's, a larger one under a context that ends when
// every caller's has ended.
func callersContext(batch []*call) (context.Context, func()) {
	if len(batch) == 1 {
		return batch[0].ctx, func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var waiting atomic.Int64
	waiting.Store(int64(len(batch)))
	stops := make([]func() bool, len(batch))
	for i, c := range batch {
		stops[i] = context.AfterFunc(c.ctx, func() {
			if waiting.Add(-1) == 0 {
				cancel()
			}
		})
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
	}
}
