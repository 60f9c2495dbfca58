package job

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// BrokerWait holds Submit's return until a task it enqueued is on
// Replicas replicas of the queue's Redis, or Timeout has passed. Redis
// replicates asynchronously: without the wait, a failover right after a
// 202 can promote a replica that never got the task. The job is not lost
// then — its jobs row is the truth, and the Relay enqueues the missing
// task — but it waits for the relay's next pass. With the wait, the task
// survives the failover and runs without that delay.
//
// asynq enqueues on connections of its own pool, and WAIT covers only the
// writes of the connection it is sent on. So after the enqueue, BrokerWait
// writes a marker key and sends WAIT on one connection of Client: the
// primary's replication stream is ordered, and the enqueue returned before
// the marker was written, so a replica that acknowledges the marker holds
// the task too. In a Redis Cluster the marker carries the queue's hash tag
// ({queue}, as asynq's keys of that queue do), so it is written to the
// node that holds the queue and its WAIT counts that node's replicas.
type BrokerWait struct {
	// Client reaches the queue's Redis: the same server, or cluster, as
	// the asynq client's.
	Client   redis.UniversalClient
	Replicas int
	// Timeout bounds the wait; a shortfall makes Submit return
	// ErrTaskDeferred with the recorded job, which is accepted all the
	// same.
	Timeout time.Duration
}

// errNotReplicated is a wait that fell short.
var errNotReplicated = errors.New("task enqueued, not yet acknowledged by the queue's replicas")

// markerTTL keeps the marker key from lingering: it is rewritten by every
// enqueue and read by nobody.
const markerTTL = time.Minute

// wait writes queue's marker and waits for the replicas.
func (b *BrokerWait) wait(ctx context.Context, queue string) error {
	key := "idemgate:broker-wait:{" + queue + "}"
	var client redis.Cmdable = b.Client
	if cc, ok := b.Client.(*redis.ClusterClient); ok {
		node, err := cc.MasterForKey(ctx, key)
		if err != nil {
			return err
		}
		client = node
	}
	pipe := client.Pipeline()
	pipe.Set(ctx, key, "1", markerTTL)
	wait := pipe.Do(ctx, "wait", b.Replicas, max(b.Timeout.Milliseconds(), 1))
	if _, err := pipe.Exec(ctx); err != nil {
		return err
	}
	n, err := wait.Int64()
	if err != nil {
		return err
	}
	if n < int64(b.Replicas) {
		return fmt.Errorf("%w: %d of %d in %v", errNotReplicated, n, b.Replicas, b.Timeout)
	}
	return nil
}
