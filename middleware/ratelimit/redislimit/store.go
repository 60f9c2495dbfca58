package redislimit

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sethvargo/go-limiter"
)

var _ limiter.Store = (*Store)(nil)

// DefaultPrefix starts every key the store writes, unless Config.Prefix says
// otherwise.
const DefaultPrefix = "idemgate:"

// maxTokens is the largest budget a Lua number (a double) holds exactly.
const maxTokens = 1 << 53

// Config configures a Store. The zero value of every field means its
// default.
type Config struct {
	// Tokens is the number of Takes allowed per Interval. Default 1.
	Tokens uint64
	// Interval is the length of each budget window, to the microsecond.
	// Default 1s.
	Interval time.Duration
	// Prefix starts every key, so that several deployments or tests can
	// share one Redis. Default DefaultPrefix. It should not contain '{' or
	// '}': the bucket's hash tag must be the first pair of braces in the
	// key.
	Prefix string
	// IdleTTL keeps a bucket this much longer after its interval ends
	// without a Take. Only a limit given by Set needs it: a missing bucket
	// on the store's limit is the same as a full one. Default 0.
	IdleTTL time.Duration
}

// Store is a limiter.Store in Redis. It is safe for concurrent use. The
// Redis client stays the caller's: Close does not close it.
type Store struct {
	client   redis.UniversalClient
	scripts  scripts
	prefix   string
	tokens   string // ARGV[1]
	interval string // ARGV[2], µs
	idle     string // ARGV[3], ms
	stopped  atomic.Bool
}

// New returns a store on client: a *redis.Client, a *redis.ClusterClient or
// anything else that implements redis.UniversalClient. It does not contact
// Redis.
func New(client redis.UniversalClient, c *Config) (*Store, error) {
	if c == nil {
		c = new(Config)
	}
	var errs []error
	if client == nil {
		errs = append(errs, errors.New("nil client"))
	}
	tokens := c.Tokens
	if tokens == 0 {
		tokens = 1
	}
	if tokens > maxTokens {
		errs = append(errs, fmt.Errorf("tokens: %d is more than 2^53", tokens))
	}
	interval := c.Interval
	if interval == 0 {
		interval = time.Second
	}
	if interval < time.Microsecond {
		errs = append(errs, fmt.Errorf("interval: %s is shorter than 1µs", interval))
	}
	if c.IdleTTL < 0 {
		errs = append(errs, fmt.Errorf("idle_ttl: %s is negative", c.IdleTTL))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("redislimit: %w", err)
	}
	prefix := c.Prefix
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return &Store{
		client:   client,
		scripts:  newScripts(),
		prefix:   prefix,
		tokens:   strconv.FormatUint(tokens, 10),
		interval: strconv.FormatInt(interval.Microseconds(), 10),
		idle:     strconv.FormatInt(c.IdleTTL.Milliseconds(), 10),
	}, nil
}

// Key returns the Redis key of key's bucket.
func (s *Store) Key(key string) string { return s.prefix + "rl:{" + key + "}" }

func (s *Store) run(ctx context.Context, script *redis.Script, key string, args ...any) *redis.Cmd {
	return script.Run(ctx, s.client, []string{s.Key(key)}, append([]any{s.tokens, s.interval, s.idle}, args...)...)
}

// Take takes a token from key's bucket. It returns the bucket's limit, the
// tokens left, the end of the current interval (Unix nanoseconds, Redis
// clock) and whether a token was taken. err is a Redis or context error,
// never a refusal; after Close it is limiter.ErrStopped.
func (s *Store) Take(ctx context.Context, key string) (tokens, remaining, reset uint64, ok bool, err error) {
	if s.stopped.Load() {
		return 0, 0, 0, false, limiter.ErrStopped
	}
	vals, err := s.run(ctx, s.scripts.take, key).Int64Slice()
	if err != nil {
		return 0, 0, 0, false, fmt.Errorf("redislimit: take: %w", err)
	}
	if len(vals) != 4 {
		return 0, 0, 0, false, fmt.Errorf("redislimit: take: %d values in reply, want 4", len(vals))
	}
	return uint64(vals[0]), uint64(vals[1]), uint64(vals[2]) * uint64(time.Microsecond), vals[3] == 1, nil
}

// TakeN takes n tokens from key's bucket, all or none, and returns what
// Take does: ok is whether they were taken.
func (s *Store) TakeN(ctx context.Context, key string, n uint64) (tokens, remaining, reset uint64, ok bool, err error) {
	if s.stopped.Load() {
		return 0, 0, 0, false, limiter.ErrStopped
	}
	vals, err := s.run(ctx, s.scripts.takeN, key, strconv.FormatUint(n, 10)).Int64Slice()
	if err != nil {
		return 0, 0, 0, false, fmt.Errorf("redislimit: take: %w", err)
	}
	if len(vals) != 4 {
		return 0, 0, 0, false, fmt.Errorf("redislimit: take: %d values in reply, want 4", len(vals))
	}
	return uint64(vals[0]), uint64(vals[1]), uint64(vals[2]) * uint64(time.Microsecond), vals[3] == 1, nil
}

// Get returns key's limit and the tokens left in the current interval,
// without taking one; 0, 0 when Redis has no bucket for key.
func (s *Store) Get(ctx context.Context, key string) (tokens, remaining uint64, err error) {
	if s.stopped.Load() {
		return 0, 0, limiter.ErrStopped
	}
	vals, err := s.run(ctx, s.scripts.get, key).Int64Slice()
	if err != nil {
		return 0, 0, fmt.Errorf("redislimit: get: %w", err)
	}
	if len(vals) != 2 {
		return 0, 0, fmt.Errorf("redislimit: get: %d values in reply, want 2", len(vals))
	}
	return uint64(vals[0]), uint64(vals[1]), nil
}

// Set gives key its own limit, replacing its bucket with a full one whose
// interval starts now. The limit lasts as long as the bucket: see IdleTTL.
func (s *Store) Set(ctx context.Context, key string, tokens uint64, interval time.Duration) error {
	if s.stopped.Load() {
		return limiter.ErrStopped
	}
	if tokens > maxTokens || interval < time.Microsecond {
		return fmt.Errorf("redislimit: set: %d per %s is out of range", tokens, interval)
	}
	err := s.run(ctx, s.scripts.set, key,
		strconv.FormatUint(tokens, 10), strconv.FormatInt(interval.Microseconds(), 10)).Err()
	if err != nil {
		return fmt.Errorf("redislimit: set: %w", err)
	}
	return nil
}

// Burst adds tokens to key's bucket for the rest of its current interval;
// the next interval starts from the limit again.
func (s *Store) Burst(ctx context.Context, key string, tokens uint64) error {
	if s.stopped.Load() {
		return limiter.ErrStopped
	}
	if tokens > maxTokens {
		return fmt.Errorf("redislimit: burst: %d tokens is more than 2^53", tokens)
	}
	if err := s.run(ctx, s.scripts.burst, key, strconv.FormatUint(tokens, 10)).Err(); err != nil {
		return fmt.Errorf("redislimit: burst: %w", err)
	}
	return nil
}

// Close stops the store: every later call returns limiter.ErrStopped. The
// buckets stay in Redis for other instances.
func (s *Store) Close(context.Context) error {
	s.stopped.Store(true)
	return nil
}
