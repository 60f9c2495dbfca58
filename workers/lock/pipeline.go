package lock

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Round trips. Every job takes its lock (SET NX) and releases it (a
// script), and a long one renews it: each a round trip of its own, a write
// and a read syscall on both sides of the connection. A Locker keeps one
// round trip on the wire at a time, and commands that arrive meanwhile go
// together in the next one, as a pipeline: one write, one read and one
// pass of Redis's event loop for many. Each command keeps its own reply
// and error; a pipeline is not a transaction and needs none, since each
// command touches one key. Nobody waits for a pipeline to fill: a command
// that finds nothing on the wire starts the sender, which sends it at
// once, so a lone job pays nothing more than a goroutine's start. A
// command that arrives while a round trip is out waits for it, less than
// a round trip, where a job's database writes take milliseconds.
//
// A caller waits for its reply or for its context, whichever ends first.
// A command whose caller has left while it was queued is dropped, never
// sent: a lock nobody waits for would be held for nobody until its TTL,
// and a renewal nobody waits for would extend a lease already ended.
// Release is the exception. Its caller has stopped the lease already, and
// a release dropped would keep the resource locked, to its next job
// included, until the TTL (30s by default), where a release sent late
// frees it at once; the script deletes the key only if it is still ours,
// so sending it late is safe. A pipeline waits for a pool connection under
// a context that ends when every caller still owed its command has left
// (never, while it carries a release); on the wire, the client's read and
// write timeouts bound it. The redisstore package's pipeliner works the
// same way; docs/design/batching.md compares the batchers.
// maxPipeline bounds the commands of one round trip.
const maxPipeline = 64

// pipelineClient is a client that can pipeline. Every go-redis client
// can; a Client that cannot sends each command on its own.
type pipelineClient interface {
	Client
	Pipeline() redis.Pipeliner
}

// call is one command waiting for a round trip.
type call struct {
	ctx context.Context // the caller's: the command is sent only while it is live
	// keep sends the command even once its caller has left: a release.
	keep   bool
	script *redis.Script // nil for a plain command (args)
	keys   []string
	args   []any
	// more queues writes that go out right after the command, in the
	// same round trip (ReleaseWith).
	more func(redis.Pipeliner)

	cmd     *redis.Cmd
	moreErr error         // the first error among more's writes
	done    chan struct{} // closed when cmd holds the reply
}

// pipeliner sends a Locker's commands, sharing round trips between those
// that queue up. Its sender is the Locker's: it ends when the queue is
// empty, and Locker.Wait waits for it.
type pipeliner struct {
	client pipelineClient

	mu      sync.Mutex
	queue   []*call
	sending bool       // the sender runs, with at most one round trip on the wire
	idle    *sync.Cond // signalled when the sender stops

	// What went out: commands, and the round trips that carried them.
	commands, trips atomic.Int64
}

func newPipeliner(client pipelineClient) *pipeliner {
	p := &pipeliner{client: client}
	p.idle = sync.NewCond(&p.mu)
	return p
}

// run sends c and returns its reply, or ctx's error as soon as the
// caller's context ends.
func (p *pipeliner) run(c *call) *call {
	if err := c.ctx.Err(); err != nil && !c.keep {
		c.cmd = failedCmd(c.ctx, err)
		return c
	}
	c.done = make(chan struct{})
	p.mu.Lock()
	p.queue = append(p.queue, c)
	start := !p.sending
	p.sending = true
	p.mu.Unlock()
	if start {
		go p.send()
	}
	select {
	case <-c.done:
		return c
	case <-c.ctx.Done():
		select {
		case <-c.done: // the reply came with the deadline: it stands
			return c
		default:
			// Queued, the command is dropped (take) unless it is a
			// release; on the wire, its reply goes unread.
			return &call{cmd: failedCmd(c.ctx, context.Cause(c.ctx))}
		}
	}
}

// send sends round trips until the queue is empty.
func (p *pipeliner) send() {
	for {
		batch := p.take()
		if batch == nil {
			return
		}
		p.exec(batch)
	}
}

// take removes up to maxPipeline commands from the queue, dropping those
// whose caller has left (releases excepted), and returns them. When none
// is left it marks the sender stopped and returns nil.
func (p *pipeliner) take() []*call {
	p.mu.Lock()
	defer p.mu.Unlock()
	var batch []*call
	for len(p.queue) > 0 && len(batch) < maxPipeline {
		c := p.queue[0]
		p.queue[0] = nil
		p.queue = p.queue[1:]
		if c.ctx.Err() != nil && !c.keep {
			continue // its caller returned ctx's error: it never runs
		}
		batch = append(batch, c)
	}
	if len(batch) == 0 {
		p.sending = false
		p.idle.Broadcast()
		return nil
	}
	return batch
}

// exec sends batch in one round trip and fills every call's reply.
func (p *pipeliner) exec(batch []*call) {
	ctx, stop := callersContext(batch)
	defer stop()
	p.trips.Add(1)
	p.commands.Add(int64(len(batch)))
	pipe := p.client.Pipeline()
	spans := make([][2]int, len(batch))
	for i, c := range batch {
		start := pipe.Len()
		if c.script != nil {
			c.cmd = c.script.EvalSha(ctx, pipe, c.keys, c.args...)
		} else {
			c.cmd = pipe.Do(ctx, c.args...)
		}
		if c.more != nil {
			c.more(pipe)
		}
		spans[i] = [2]int{start, pipe.Len()}
	}
	cmds, _ := pipe.Exec(ctx) // each command carries its own error
	for i, c := range batch {
		for _, m := range cmds[spans[i][0]+1 : spans[i][1]] {
			if err := m.Err(); err != nil {
				c.moreErr = err
				break
			}
		}
		if err := c.cmd.Err(); err != nil && c.script != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			// The script is not loaded on that node (a restart, a
			// failover, SCRIPT FLUSH), so it did not run: Run loads
			// and runs it.
			c.cmd = c.script.Run(c.sendContext(), p.client, c.keys, c.args...)
		}
		close(c.done)
	}
}

// sendContext is the context c's command is sent under on its own.
func (c *call) sendContext() context.Context {
	if c.keep {
		return context.WithoutCancel(c.ctx)
	}
	return c.ctx
}

// wait returns once the sender has stopped.
func (p *pipeliner) wait() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.sending {
		p.idle.Wait()
	}
}

// callersContext is the context a round trip runs under: one that ends
// when every caller still owed its command has left. A release keeps it
// open; a round trip of one runs under its caller's context.
func callersContext(batch []*call) (context.Context, func()) {
	for _, c := range batch {
		if c.keep {
			return context.WithoutCancel(c.ctx), func() {}
		}
	}
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

// failedCmd is a reply that never came: err, as a command's error.
func failedCmd(ctx context.Context, err error) *redis.Cmd {
	cmd := redis.NewCmd(ctx)
	cmd.SetErr(err)
	return cmd
}
