package lock

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	mathrand "math/rand/v2"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	// ErrBusy is returned by Acquire when another owner holds the lock and
	// the wait (Options.Wait) ran out.
	ErrBusy = errors.New("lock: held by another owner")
	// ErrLost is the cause of a lease's Context when the lease is no longer
	// known to be ours: a renewal failed, the key was missing or owned by
	// someone else, or no renewal succeeded within one TTL.
	ErrLost = errors.New("lock: lease lost")
	// ErrReleased is the cause of a lease's Context after Release.
	ErrReleased = errors.New("lock: lease released")
	// ErrAbandoned is the cause of a lease's Context after Abandon.
	ErrAbandoned = errors.New("lock: lease abandoned")
)

// Client is the part of a Redis client the lock uses. A *redis.Client, a
// *redis.ClusterClient and every redis.UniversalClient satisfy it.
type Client interface {
	Do(ctx context.Context, args ...any) *redis.Cmd
	redis.Scripter
}

var _ Client = (redis.UniversalClient)(nil)

// Options configure a Locker. The zero value is usable.
type Options struct {
	// Prefix is prepended to every key, before "lock:". Default "".
	Prefix string
	// TTL is how long a lock lives in Redis without renewal; a lease renews
	// it every TTL/3. Default 30s; at least 10ms, in whole milliseconds.
	TTL time.Duration
	// Wait bounds how long Acquire waits for a lock held by someone else
	// before it returns ErrBusy. Default 0: try once.
	Wait time.Duration
	// RetryInterval is the mean pause between attempts while Acquire waits;
	// each pause is drawn uniformly between half and one and a half times it
	// so waiters do not retry in step. Default 100ms.
	RetryInterval time.Duration

	// OnRenewed, if set, is called after each successful renewal.
	OnRenewed func(resource string)
	// OnLost, if set, is called once when a lease is lost, with the cause
	// (which wraps ErrLost). It is not called for Release or Abandon.
	OnLost func(resource string, cause error)
	// BeforeRenew, if set, runs in the lease's goroutine before each
	// renewal. Blocking in it really pauses renewals, which is how tests
	// reproduce a process that stalls past its TTL. It must return once ctx
	// is done, or Release and Abandon wait for it.
	BeforeRenew func(ctx context.Context, resource string)
}

// Defaults for Options.
const (
	DefaultTTL           = 30 * time.Second
	DefaultRetryInterval = 100 * time.Millisecond
	minTTL               = 10 * time.Millisecond
)

func (o Options) withDefaults() Options {
	if o.TTL == 0 {
		o.TTL = DefaultTTL
	}
	if o.RetryInterval == 0 {
		o.RetryInterval = DefaultRetryInterval
	}
	return o
}

func (o Options) validate() error {
	var errs []error
	if o.TTL < minTTL {
		errs = append(errs, fmt.Errorf("lock: TTL %s is below %s", o.TTL, minTTL))
	}
	if o.TTL%time.Millisecond != 0 {
		errs = append(errs, fmt.Errorf("lock: TTL %s is not a whole number of milliseconds", o.TTL))
	}
	if o.Wait < 0 {
		errs = append(errs, fmt.Errorf("lock: Wait %s is negative", o.Wait))
	}
	if o.RetryInterval < 0 {
		errs = append(errs, fmt.Errorf("lock: RetryInterval %s is negative", o.RetryInterval))
	}
	return errors.Join(errs...)
}

// The scripts compare the owner token before touching the key, so only the
// owner can extend or delete its lock.
const (
	renewSource = `if redis.call("get", KEYS[1]) == ARGV[1] then
	return redis.call("pexpire", KEYS[1], ARGV[2])
end
return 0`
	releaseSource = `if redis.call("get", KEYS[1]) == ARGV[1] then
	return redis.call("del", KEYS[1])
end
return 0`
)

// Locker takes locks on resources. It is safe for concurrent use.
type Locker struct {
	client  Client
	opts    Options
	renew   *redis.Script
	release *redis.Script
	// pipe shares round trips between concurrent commands (pipeline.go);
	// nil for a client that cannot pipeline.
	pipe *pipeliner
}

// New returns a Locker on client. It reports every invalid option at once.
func New(client Client, opts Options) (*Locker, error) {
	if client == nil {
		return nil, errors.New("lock: nil Redis client")
	}
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	l := &Locker{
		client:  client,
		opts:    opts,
		renew:   redis.NewScript(renewSource),
		release: redis.NewScript(releaseSource),
	}
	if p, ok := client.(pipelineClient); ok {
		l.pipe = newPipeliner(p)
	}
	return l, nil
}

// Wait returns once none of the Locker's round trips is on the wire. The
// goroutine that sends them ends by itself once nothing is queued; a
// process that must leave nothing running calls Wait after its last call.
// The Locker stays usable.
func (l *Locker) Wait() {
	if l.pipe != nil {
		l.pipe.wait()
	}
}

// do sends c: with the commands of other callers when the client can
// pipeline, else as a round trip of its own.
func (l *Locker) do(c *call) *call {
	if l.pipe != nil {
		return l.pipe.run(c)
	}
	if c.script != nil {
		c.cmd = c.script.Run(c.ctx, l.client, c.keys, c.args...)
	} else {
		c.cmd = l.client.Do(c.ctx, c.args...)
	}
	return c
}

// TTL is the lock TTL in use.
func (l *Locker) TTL() time.Duration { return l.opts.TTL }

// Key returns the Redis key of resource's lock: `<prefix>lock:{<resource>}`.
func (l *Locker) Key(resource string) string {
	return l.opts.Prefix + "lock:{" + resource + "}"
}

// Held reports, for each resource, whether someone holds its lock: its key
// exists in Redis. It is what the relay asks before handing a job whose
// attempt lost its lock to another worker (job.RelayOptions.Locks). A
// client that pipelines (every go-redis client does) asks for all the keys
// in one round trip; the others, one EXISTS per key.
func (l *Locker) Held(ctx context.Context, resources []string) ([]bool, error) {
	held := make([]bool, len(resources))
	if p, ok := l.client.(interface{ Pipeline() redis.Pipeliner }); ok && len(resources) > 0 {
		pipe := p.Pipeline()
		cmds := make([]*redis.IntCmd, len(resources))
		for i, r := range resources {
			cmds[i] = pipe.Exists(ctx, l.Key(r))
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, fmt.Errorf("lock: held: %w", err)
		}
		for i, c := range cmds {
			held[i] = c.Val() > 0
		}
		return held, nil
	}
	for i, r := range resources {
		n, err := l.client.Do(ctx, "EXISTS", l.Key(r)).Int64()
		if err != nil {
			return nil, fmt.Errorf("lock: held %s: %w", l.Key(r), err)
		}
		held[i] = n > 0
	}
	return held, nil
}

// Acquire takes the lock on resource, waiting up to Options.Wait while
// someone else holds it, and returns a lease that renews itself until
// Release, Abandon, loss, or the end of ctx. When ctx ends the renewals stop
// and the key is left to expire; call Release to delete it sooner.
//
// A lock held by another owner is reported as an error wrapping ErrBusy.
func (l *Locker) Acquire(ctx context.Context, resource string) (*Lease, error) {
	key := l.Key(resource)
	token := rand.Text()
	deadline := time.Now().Add(l.opts.Wait)
	for {
		start := time.Now()
		ok, err := l.set(ctx, key, token)
		if err != nil {
			return nil, fmt.Errorf("lock: acquire %s: %w", key, err)
		}
		if ok {
			return newLease(ctx, l, resource, key, token, start), nil
		}
		remaining := time.Until(deadline)
		if remaining <= 0 {
			return nil, fmt.Errorf("lock: %s: %w", key, ErrBusy)
		}
		t := time.NewTimer(min(jitter(l.opts.RetryInterval), remaining))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("lock: acquire %s: %w", key, context.Cause(ctx))
		case <-t.C:
		}
	}
}

// set is `SET key token NX PX ttl`.
func (l *Locker) set(ctx context.Context, key, token string) (bool, error) {
	err := l.do(&call{ctx: ctx, args: []any{"set", key, token, "nx", "px", l.opts.TTL.Milliseconds()}}).cmd.Err()
	switch {
	case errors.Is(err, redis.Nil):
		return false, nil
	case err != nil:
		return false, err
	}
	return true, nil
}

// jitter returns a duration uniformly drawn from [d/2, 3d/2).
func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return d/2 + time.Duration(mathrand.Int64N(int64(d)))
}
