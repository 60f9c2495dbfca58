package workers

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/idemgate/idemgate/workers/lock"
)

// Config is the worker section of the configuration file (`worker:`). Zero
// fields take the defaults written next to them.
type Config struct {
	// Concurrency is how many tasks run at once. Default 10.
	Concurrency int `yaml:"concurrency"`
	// Queues maps queue names to priorities (higher is served more often).
	// Default {"default": 1}.
	Queues map[string]int `yaml:"queues"`
	// LockTTL is the resource lock's TTL; a running job renews it every
	// LockTTL/3 and stops writing when a renewal fails. Default 30s.
	LockTTL time.Duration `yaml:"lock_ttl"`
	// MaxAttempts is how many real attempts a job gets before it is marked
	// failed and archived. A busy lock is not an attempt. Default 10.
	MaxAttempts int `yaml:"max_attempts"`
	// ShutdownTimeout is how long shutdown waits for running jobs; a job
	// still running then has its context cancelled and its task returns to
	// the queue. Default 25s (inside Kubernetes' default 30s grace period).
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`
	// Retry shapes the retry delays. Defaults: see Backoff.
	Retry Backoff `yaml:"retry"`
}

// Defaults for Config.
const (
	DefaultConcurrency     = 10
	DefaultLockTTL         = 30 * time.Second
	DefaultMaxAttempts     = 10
	DefaultShutdownTimeout = 25 * time.Second
)

func (c Config) withDefaults() Config {
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if len(c.Queues) == 0 {
		c.Queues = map[string]int{"default": 1}
	}
	if c.LockTTL == 0 {
		c.LockTTL = DefaultLockTTL
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = DefaultShutdownTimeout
	}
	c.Retry = c.Retry.withDefaults()
	return c
}

// validate reports every problem of a config with defaults applied.
func (c Config) validate() error {
	var errs []error
	if c.Concurrency < 1 {
		errs = append(errs, fmt.Errorf("worker.concurrency: %d, want at least 1", c.Concurrency))
	}
	for name, prio := range c.Queues {
		if strings.TrimSpace(name) == "" {
			errs = append(errs, errors.New("worker.queues: empty queue name"))
		}
		if prio < 1 {
			errs = append(errs, fmt.Errorf("worker.queues.%s: priority %d, want at least 1", name, prio))
		}
	}
	if c.LockTTL < 10*time.Millisecond || c.LockTTL%time.Millisecond != 0 {
		errs = append(errs, fmt.Errorf("worker.lock_ttl: %s, want at least 10ms in whole milliseconds", c.LockTTL))
	}
	if c.MaxAttempts < 1 {
		errs = append(errs, fmt.Errorf("worker.max_attempts: %d, want at least 1", c.MaxAttempts))
	}
	if c.ShutdownTimeout < 0 {
		errs = append(errs, fmt.Errorf("worker.shutdown_timeout: %s is negative", c.ShutdownTimeout))
	}
	if err := c.Retry.validate(); err != nil {
		errs = append(errs, fmt.Errorf("worker.retry: %w", err))
	}
	return errors.Join(errs...)
}

// Validate reports every problem of c, after defaults, at once.
func (c Config) Validate() error { return c.withDefaults().validate() }

// Deps returns the handler dependencies this config implies: locks with
// LockTTL on rdb (a client of the locks' own, not asynq's) and MaxAttempts.
// Set Logger, Observer and OnStatus on the result as needed.
func (c Config) Deps(db DB, rdb lock.Client) Deps {
	c = c.withDefaults()
	return Deps{
		DB:          db,
		Redis:       rdb,
		Lock:        lock.Options{TTL: c.LockTTL},
		MaxAttempts: c.MaxAttempts,
	}
}
