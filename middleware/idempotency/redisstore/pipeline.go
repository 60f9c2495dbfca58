package redisstore

// Why this is not pgstore's batching (../pgstore/batch.go), which solves
// the same problem — many concurrent claims and completions sharing one
// round trip: there the round trip shares a commit, so a batch is one
// transaction, sorted into one lock order, rerun statement by statement
// when it fails, and run by flusher goroutines that Close must stop. Redis
// has no commit to share: a pipeline is not a transaction, each script
// stays atomic on its own and its error is its own, and the only retry is
// EVAL after NOSCRIPT (the node lacks the cached script). So a pipeline
// needs no rollback handling and no goroutines: callers lead in turn, and
// a Store dropped without Close leaves nothing running. One mechanism for
// both would carry both failure models.

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Pipelining. Every request runs two scripts (claim, then complete), each a
// write and a read syscall on both sides of the connection. Scripts that
// arrive while others are on the wire are sent together, as one pipeline:
// one write, one read, and one pass of Redis's event loop for many. Each
// script stays atomic on its own; a pipeline is not a transaction and needs
// none. Nobody waits for a pipeline to fill: the caller that finds no
// pipeline free sends its own script at once, and scripts that queue
// behind a busy pipeline go out together when it returns.
//
// There are no goroutines of the pipeliner's own. The first caller to find
// a free slot leads: it sends what is queued and, when more queued
// meanwhile, hands the lead to the first of those callers. So nothing is
// left running when the store is dropped.
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
	script *redis.Script
	keys   []string
	args   []any
	cmd    *redis.Cmd
	done   chan struct{} // closed when cmd holds the reply
	lead   chan struct{} // closed when this caller is to send the queue
	handed bool          // lead closed; under pipeliner.mu
}

// hot runs one of the scripts every request runs: through the pipeliner
// when pipelining is on, else on its own under ctx.
func (s *Store) hot(ctx context.Context, script *redis.Script, keys []string, args ...any) *redis.Cmd {
	if s.pipe == nil {
		return script.Run(ctx, s.client, keys, args...)
	}
	if err := ctx.Err(); err != nil {
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(err)
		return cmd
	}
	return s.pipe.run(script, keys, args...)
}

type pipeliner struct {
	client redis.UniversalClient
	max    int
	slots  int

	mu      sync.Mutex
	queue   []*call
	sending int // pipelines on the wire

	// What went out: scripts and the round trips that carried them.
	scripts, trips atomic.Int64
}

// run sends script and returns its reply.
func (p *pipeliner) run(script *redis.Script, keys []string, args ...any) *redis.Cmd {
	c := &call{script: script, keys: keys, args: args, done: make(chan struct{}), lead: make(chan struct{})}
	p.mu.Lock()
	p.queue = append(p.queue, c)
	lead := p.sending < p.slots
	if lead {
		p.sending++
	}
	p.mu.Unlock()
	leadCh := c.lead
	for {
		if lead {
			// The batch may not reach this call when others queued
			// first; then a later leader sends it.
			p.send()
			lead = false
		}
		select {
		case <-c.done:
			// A call is handed the lead only while queued, so before its
			// reply: a lead not taken yet is taken now, or its slot would
			// never be passed on.
			select {
			case <-leadCh:
				p.send()
			default:
			}
			return c.cmd
		case <-leadCh:
			lead, leadCh = true, nil // handed the lead: once at most
		}
	}
}

// send sends the queue (up to max scripts) and passes the lead on if more
// is queued, or frees the slot.
func (p *pipeliner) send() {
	p.mu.Lock()
	n := min(len(p.queue), p.max)
	batch := p.queue[:n:n]
	p.queue = p.queue[n:]
	p.mu.Unlock()

	if n > 0 {
		p.exec(batch)
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.queue {
		if !c.handed {
			// The slot stays taken: the next leader has it.
			c.handed = true
			close(c.lead)
			return
		}
	}
	p.sending--
}

// exec runs batch and fills every call's cmd. The callers' contexts are
// not used: a script on the wire runs to completion whoever waits, and the
// client's read and write timeouts bound it.
func (p *pipeliner) exec(batch []*call) {
	ctx := context.Background()
	p.trips.Add(1)
	p.scripts.Add(int64(len(batch)))
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
			// node, SCRIPT FLUSH): Run loads it.
			c.cmd = c.script.Run(ctx, p.client, c.keys, c.args...)
		}
		close(c.done)
	}
}
