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

// Waiting for replicas. Redis replicates asynchronously: a primary answers
// a write before any replica has it, and a replica promoted on failover
// lacks whatever was still on its way. For a claim or a completion that is
// a promise broken: the key answered 201, the record is gone after the
// promotion, and the retry runs the request again. WithWait closes that
// window with WAIT numreplicas timeout, sent on the connection of the
// scripts, in their pipeline: WAIT blocks until that many replicas have
// acknowledged every write the connection made before it, so one WAIT
// after a pipelined batch covers the whole batch and costs one round trip
// to the replicas, not one per request.
//
// Which changes wait, and why:
//
//   - Claim: the request goes upstream only once its claim would survive a
//     failover. A claim that finds a record (a replay, a conflict) writes
//     a field all the same (claimScript's touch), so that the WAIT also
//     covers the record it replays: another gateway's completion still
//     unacknowledged must not be replayed before it is, or a failover
//     could lose it after a client saw it.
//   - Complete and MarkUnknown: the answer is sent, or the outcome held for
//     an operator, only once a failover cannot undo it. A lost hold would
//     let the lease expire and the request run again.
//   - Renew: a renewal lost on failover would bring the lease's end back,
//     and another gateway could take the key over while this attempt still
//     runs. A renewal whose wait falls short is a failed renewal: the
//     attempt's own lease clock is not extended (Attempt.Check).
//   - Get: as a claim that finds a record, for the middleware's answer
//     from a record taken over.
//   - Release does not wait. Nothing ran under a released claim, or its
//     effect is declared not to have happened: losing the release brings
//     back the claim in flight (a retry waits for its lease, then takes it
//     over with a higher token) or no record at all. That costs a retry
//     latency, never a second answer.
//   - Resolve, Delete and Watch are an operator's or a wake-up's, not a
//     promise to a client.
//
// When fewer replicas than asked acknowledge before the timeout, the call
// fails with a *ReplicaError (errors.Is idempotency.ErrNotDurable), though
// the script ran on the primary: the middleware then treats the write as
// not known to be durable (a claim is released and refused with 503, a
// completion is stored again in the background and its answer held back).
// Complete and MarkUnknown sent again by the owner whose change is already
// on the primary succeed again and write once more, so the next WAIT
// covers the change (the replication stream is ordered: a later write
// acknowledged means every earlier one is too).
//
// In a Redis Cluster, WAIT counts the replicas of the node the connection
// is on, so the scripts of a batch go out grouped by the primary that owns
// their key (ClusterClient.MasterForKey), each group with its WAIT on that
// node's connection. A slot that moves meanwhile answers MOVED, which fails
// the call like any other store error.

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
