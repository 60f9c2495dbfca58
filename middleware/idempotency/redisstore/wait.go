package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/middleware/idempotency"
)

// Waiting for replicas. WithWait sends WAIT in the scripts' pipeline, one per
// batch and per cluster primary. Release, Resolve, Delete and Watch do not wait.
// Design: docs/design/redis-store.md#waiting-for-replicas says which changes
// wait and why.

// WithWait makes Claim, Complete, MarkUnknown, Renew and Get return only
// once replicas replicas of Redis acknowledged their writes, waiting at
// most timeout (WAIT replicas timeout, in the scripts' round trip). A
// shortfall is a *ReplicaError. replicas 0 (the default) waits for none.
// Keep timeout well below the middleware's StoreTimeout.
func WithWait(replicas int, timeout time.Duration) Option {
	return func(s *Store) { s.wait = waitFor{replicas: replicas, timeout: timeout} }
}

// waitFor is WithWait's setting; the zero value waits for nothing.
type waitFor struct {
	replicas int
	timeout  time.Duration
}

func (w waitFor) on() bool { return w.replicas > 0 }

// flag is the scripts' waiting argument.
func (w waitFor) flag() string {
	if w.on() {
		return "1"
	}
	return "0"
}

// ReplicaError is a write the primary made but fewer replicas than asked
// acknowledged within the timeout: a failover may still lose it.
type ReplicaError struct {
	Acked, Want int64
}

func (e *ReplicaError) Error() string {
	return fmt.Sprintf("redisstore: %d of %d replicas acknowledged the write in time", e.Acked, e.Want)
}

// Unwrap makes a ReplicaError an idempotency.ErrNotDurable.
func (e *ReplicaError) Unwrap() error { return idempotency.ErrNotDurable }

// execWaited runs batch's scripts on client, each followed in its pipeline
// by the WAIT that covers it, and fills every call's cmd. It returns once
// every reply is in.
func execWaited(ctx context.Context, client redis.UniversalClient, w waitFor, batch []*call) {
	cc, ok := client.(*redis.ClusterClient)
	if !ok {
		pipeWaited(ctx, client, w, batch)
		return
	}
	groups := make(map[*redis.Client][]*call)
	for _, c := range batch {
		if len(c.keys) == 0 {
			c.cmd = failedCmd(ctx, errors.New("redisstore: a script without a key cannot be waited for in a cluster"))
			continue
		}
		node, err := cc.MasterForKey(ctx, c.keys[0])
		if err != nil {
			c.cmd = failedCmd(ctx, err)
			continue
		}
		groups[node] = append(groups[node], c)
	}
	var wg sync.WaitGroup
	for node, calls := range groups {
		wg.Go(func() { pipeWaited(ctx, node, w, calls) })
	}
	wg.Wait()
}

// pipeWaited runs calls and one WAIT in a pipeline on client, one
// connection. A script the node has not loaded (NOSCRIPT) did not run: it
// is sent again whole, with a WAIT of its own.
func pipeWaited(ctx context.Context, client redis.Cmdable, w waitFor, calls []*call) {
	wait := sendWaited(ctx, client, w, calls, false)
	var again []*call
	for _, c := range calls {
		if err := c.cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			again = append(again, c)
		} else {
			judgeWait(ctx, w, c, wait)
		}
	}
	if len(again) == 0 {
		return
	}
	wait = sendWaited(ctx, client, w, again, true)
	for _, c := range again {
		judgeWait(ctx, w, c, wait)
	}
}

func sendWaited(ctx context.Context, client redis.Cmdable, w waitFor, calls []*call, whole bool) *redis.Cmd {
	pipe := client.Pipeline()
	for _, c := range calls {
		if whole {
			c.cmd = c.script.Eval(ctx, pipe, c.keys, c.args...)
		} else {
			c.cmd = c.script.EvalSha(ctx, pipe, c.keys, c.args...)
		}
	}
	// Pipeliner lacks Wait; WAIT's timeout is in milliseconds, at least 1
	// (0 would wait for ever).
	wait := pipe.Do(ctx, "wait", w.replicas, millis(w.timeout))
	_, _ = pipe.Exec(ctx) // each cmd carries its own error
	return wait
}

// judgeWait turns c's reply into a *ReplicaError when c asked to wait and
// the WAIT fell short. A script that failed keeps its own error.
func judgeWait(ctx context.Context, w waitFor, c *call, wait *redis.Cmd) {
	if !c.wait || c.cmd.Err() != nil {
		return
	}
	n, err := wait.Int64()
	switch {
	case err != nil:
		c.cmd = failedCmd(ctx, fmt.Errorf("wait for replicas: %w", err))
	case n < int64(w.replicas):
		c.cmd = failedCmd(ctx, &ReplicaError{Acked: n, Want: int64(w.replicas)})
	}
}

// run runs one script outside the pipeliner: with its WAIT when the store
// waits and waited says the change must, else as a plain round trip.
func (s *Store) run(ctx context.Context, script *redis.Script, waited bool, keys []string, args ...any) *redis.Cmd {
	if !s.wait.on() || !waited {
		return script.Run(ctx, s.client, keys, args...)
	}
	c := &call{ctx: ctx, script: script, keys: keys, args: args, wait: true}
	execWaited(ctx, s.client, s.wait, []*call{c})
	return c.cmd
}
