package workers

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/workers/lock"
)

// Config is the worker section of the configuration file (`worker:`),
// whose keys are the yaml tags. Zero fields take the defaults written next
// to them.
type Config struct {
	// Concurrency is how many tasks run at once. Default DefaultConcurrency,
	// 10.
	Concurrency int `yaml:"concurrency"`
	// Queues maps queue names to priorities (higher is served more often).
	// Each name is one CheckQueueName accepts; each priority is at least 1.
	// Default (nil) {DefaultQueue: 1}; an empty, non-nil map is refused.
	Queues map[string]int `yaml:"queues"`
	// LockTTL is the resource lock's TTL, at least 10ms in whole
	// milliseconds; a running job renews it every LockTTL/3 and stops
	// writing when a renewal fails. Default DefaultLockTTL, 30s.
	LockTTL time.Duration `yaml:"lock_ttl"`
	// MaxAttempts is how many real attempts a job gets before it is marked
	// failed and archived. A busy lock is not an attempt. Default
	// DefaultMaxAttempts, 10.
	MaxAttempts int `yaml:"max_attempts"`
	// ShutdownTimeout is how long shutdown waits for running jobs; a job
	// still running then has its context cancelled and its task returns to
	// the queue. Default DefaultShutdownTimeout, 25s (inside Kubernetes'
	// default 30s grace period).
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`
	// CancelCheckInterval is how often the worker asks which of the jobs
	// it is running have been cancelled (one query for all of them, only
	// while some run); a Go handler's context is cancelled at most this
	// long after the cancel. Default DefaultCancelInterval, 1s.
	CancelCheckInterval time.Duration `yaml:"cancel_check_interval"`
	// Retry shapes the retry delays. Defaults: see Backoff. Set in code:
	// the configuration file has no key for it.
	Retry Backoff `yaml:"-"`
}

// Defaults for Config.
const (
	DefaultConcurrency     = 10
	DefaultQueue           = job.DefaultQueue
	DefaultLockTTL         = lock.DefaultTTL
	DefaultMaxAttempts     = 10
	DefaultShutdownTimeout = 25 * time.Second
)

// minLockTTL is the shortest LockTTL, the lock package's own minimum.
const minLockTTL = 10 * time.Millisecond

// WithDefaults returns c with every field left zero replaced by its
// default, as NewServer and Validate read it.
func (c Config) WithDefaults() Config {
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.Queues == nil {
		c.Queues = map[string]int{DefaultQueue: 1}
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
	if c.CancelCheckInterval == 0 {
		c.CancelCheckInterval = DefaultCancelInterval
	}
	c.Retry = c.Retry.withDefaults()
	return c
}

// FieldError is one problem with one field of a Config. Validate returns
// every one it finds, joined with errors.Join.
type FieldError struct {
	// Field is the field's key in the worker section: "concurrency",
	// "queues", "lock_ttl", "max_attempts", "shutdown_timeout",
	// "cancel_check_interval" or "retry".
	Field string
	// Queue is the entry of Queues the problem is about, if any.
	Queue string
	// Message says what is wrong, in one line.
	Message string
}

// Error reads like the configuration file's key path:
// "worker.queues.low: priority must be positive, not 0".
func (e *FieldError) Error() string {
	key := "worker." + e.Field
	if e.Queue != "" {
		key += "." + e.Queue
	}
	return key + ": " + e.Message
}

// CheckQueueName reports what is wrong with a queue name, or nil: a name
// is letters, digits, '_', '.', ':' and '-', so that it reads the same in
// Redis keys, metric labels and admin URLs.
func CheckQueueName(name string) error {
	if strings.TrimSpace(name) == "" {
		return errors.New("empty queue name")
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("_.:-", c) >= 0 {
			continue
		}
		return fmt.Errorf("%q is not a queue name (letters, digits, '_', '.', ':' and '-')", name)
	}
	return nil
}

// validate reports every problem of a config with defaults applied.
func (c Config) validate() error {
	var errs []error
	bad := func(field, queue, format string, args ...any) {
		errs = append(errs, &FieldError{Field: field, Queue: queue, Message: fmt.Sprintf(format, args...)})
	}
	if c.Concurrency < 1 {
		bad("concurrency", "", "must be positive, not %d", c.Concurrency)
	}
	switch {
	case c.LockTTL <= 0:
		bad("lock_ttl", "", "must be positive, not %s", c.LockTTL)
	case c.LockTTL < minLockTTL:
		bad("lock_ttl", "", "%s is shorter than the minimum %s", c.LockTTL, minLockTTL)
	case c.LockTTL%time.Millisecond != 0:
		bad("lock_ttl", "", "%s is not a whole number of milliseconds", c.LockTTL)
	}
	if c.MaxAttempts < 1 {
		bad("max_attempts", "", "must be positive, not %d", c.MaxAttempts)
	}
	if c.ShutdownTimeout < 0 {
		bad("shutdown_timeout", "", "must be positive, not %s", c.ShutdownTimeout)
	}
	if c.CancelCheckInterval < 0 {
		bad("cancel_check_interval", "", "must be positive, not %s", c.CancelCheckInterval)
	}
	if len(c.Queues) == 0 {
		bad("queues", "", "needs at least one queue (default: {%s: 1})", DefaultQueue)
	}
	for _, name := range slices.Sorted(maps.Keys(c.Queues)) {
		if err := CheckQueueName(name); err != nil {
			// A blank name would not show in the key path.
			queue := name
			if strings.TrimSpace(name) == "" {
				queue = ""
			}
			bad("queues", queue, "%v", err)
		}
		if prio := c.Queues[name]; prio < 1 {
			bad("queues", name, "priority must be positive, not %d", prio)
		}
	}
	if err := c.Retry.validate(); err != nil {
		for _, e := range unjoin(err) {
			bad("retry", "", "%v", e)
		}
	}
	return errors.Join(errs...)
}

// unjoin lists the errors errors.Join joined into err.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// Validate reports every problem of c, after defaults, at once, each a
// *FieldError.
func (c Config) Validate() error { return c.WithDefaults().validate() }

// Deps returns the handler dependencies this config implies: locks with
// LockTTL on rdb (a client of the locks' own, not asynq's) and MaxAttempts.
// Set Logger, Observer, Jobs and OnStatus on the result as needed.
func (c Config) Deps(db DB, rdb lock.Client) Deps {
	c = c.WithDefaults()
	return Deps{
		DB:          db,
		Redis:       rdb,
		Lock:        lock.Options{TTL: c.LockTTL},
		MaxAttempts: c.MaxAttempts,
		LimitBusy:   c.Retry.Busy,
	}
}
