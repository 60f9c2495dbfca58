package workers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/job"
)

// Server runs asynq workers for a handler (usually an *asynq.ServeMux of
// idempotent handlers) until its context ends.
type Server struct {
	redis   asynq.RedisConnOpt
	cfg     Config
	handler asynq.Handler
	logger  *slog.Logger
	tweaks  []func(*asynq.Config)
	started atomic.Bool
	running inflight
	cancels *CancelWatcher
	fair    *job.Fairness
}

// ServerOption adjusts a Server.
type ServerOption func(*Server)

// WithLogger sends asynq's own log lines to logger. Default: discarded.
func WithLogger(logger *slog.Logger) ServerOption {
	return func(s *Server) { s.logger = logger }
}

// WithAsynqConfig lets f adjust the asynq.Config after the Server has
// filled it, for settings Config does not carry (polling intervals in
// tests, an ErrorHandler, StrictPriority).
func WithAsynqConfig(f func(*asynq.Config)) ServerOption {
	return func(s *Server) { s.tweaks = append(s.tweaks, f) }
}

// NewServer validates cfg and returns a Server that will process the queues
// in cfg with handler. redisOpt is asynq's connection: give asynq a Redis
// client of its own, separate from the locks'.
func NewServer(redisOpt asynq.RedisConnOpt, cfg Config, handler asynq.Handler, opts ...ServerOption) (*Server, error) {
	var errs []error
	if redisOpt == nil {
		errs = append(errs, errors.New("workers: nil asynq Redis connection"))
	}
	if handler == nil {
		errs = append(errs, errors.New("workers: nil handler"))
	}
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	s := &Server{redis: redisOpt, cfg: cfg, handler: handler, logger: slog.New(slog.DiscardHandler)}
	for _, opt := range opts {
		opt(s)
	}
	return s, nil
}

// Run processes tasks until ctx ends, then shuts down gracefully: it stops
// fetching tasks and gives running ones cfg.ShutdownTimeout to finish.
// asynq then cancels those still running and returns their tasks to the
// queue; Run waits (up to one LockTTL more) for their handlers to return,
// so their leases end before it does. It returns an error if Redis cannot
// be reached at start or a handler outlives that wait. A Server runs once.
//
// Handlers run under ctx's values but not its cancellation: a shutdown
// lets them finish rather than cutting them off.
func (s *Server) Run(ctx context.Context) error {
	if !s.started.CompareAndSwap(false, true) {
		return errors.New("workers: server already run")
	}
	client, ok := s.redis.MakeRedisClient().(redis.UniversalClient)
	if !ok {
		return fmt.Errorf("workers: unsupported asynq Redis connection %T", s.redis)
	}
	defer client.Close()
	if err := client.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("workers: asynq Redis: %w", err)
	}

	base := context.WithoutCancel(ctx)
	acfg := asynq.Config{
		Concurrency:     s.cfg.Concurrency,
		Queues:          s.cfg.Queues,
		ShutdownTimeout: s.cfg.ShutdownTimeout,
		RetryDelayFunc:  s.cfg.Retry.RetryDelay,
		IsFailure:       IsFailure,
		Logger:          asynqLogger{s.logger},
		BaseContext:     func() context.Context { return base },
		// Scheduled jobs and retries move to their queue within a second
		// of their time (asynq keeps those times to the second), not
		// within its default five.
		DelayedTaskCheckInterval: time.Second,
	}
	for _, f := range s.tweaks {
		f(&acfg)
	}
	srv := asynq.NewServerFromRedisClient(client, acfg)
	if err := srv.Start(asynq.HandlerFunc(s.process)); err != nil {
		return fmt.Errorf("workers: start: %w", err)
	}
	// The cancel watcher outlives the handlers' shutdown: an attempt
	// finishing then may still be cancelled.
	wctx, stopWatcher := context.WithCancel(base)
	var watcher sync.WaitGroup
	if s.cancels != nil {
		watcher.Go(func() { s.cancels.Run(wctx) })
	}
	defer func() {
		stopWatcher()
		watcher.Wait()
	}()
	<-ctx.Done()
	srv.Shutdown()
	if n := s.running.wait(s.cfg.LockTTL); n > 0 {
		return fmt.Errorf("workers: %d handlers still running %s after shutdown", n, s.cfg.LockTTL)
	}
	return nil
}

func (s *Server) process(ctx context.Context, task *asynq.Task) error {
	s.running.add()
	defer s.running.done()
	if s.fair.Pooled(task) {
		return s.processPooled(ctx, task)
	}
	return s.handler.ProcessTask(ctx, task)
}

// inflight counts running handler calls. asynq stops waiting for a handler
// at its shutdown timeout; the Server keeps waiting so no handler, and no
// lease goroutine, outlives Run.
type inflight struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n drops to 0 while someone waits
}

func (f *inflight) add() {
	f.mu.Lock()
	f.n++
	f.mu.Unlock()
}

func (f *inflight) done() {
	f.mu.Lock()
	f.n--
	if f.n == 0 && f.idle != nil {
		close(f.idle)
		f.idle = nil
	}
	f.mu.Unlock()
}

// wait blocks until no call is running or d passes, and returns how many
// are still running.
func (f *inflight) wait(d time.Duration) int {
	f.mu.Lock()
	if f.n == 0 {
		f.mu.Unlock()
		return 0
	}
	if f.idle == nil {
		f.idle = make(chan struct{})
	}
	idle := f.idle
	f.mu.Unlock()

	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-idle:
	case <-t.C:
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}

// asynqLogger writes asynq's log lines to slog.
type asynqLogger struct{ l *slog.Logger }

func (a asynqLogger) Debug(args ...any) { a.l.Debug(fmt.Sprint(args...), "component", "asynq") }
func (a asynqLogger) Info(args ...any)  { a.l.Info(fmt.Sprint(args...), "component", "asynq") }
func (a asynqLogger) Warn(args ...any)  { a.l.Warn(fmt.Sprint(args...), "component", "asynq") }
func (a asynqLogger) Error(args ...any) { a.l.Error(fmt.Sprint(args...), "component", "asynq") }

// Fatal logs at error level; a library does not exit the process.
func (a asynqLogger) Fatal(args ...any) { a.l.Error(fmt.Sprint(args...), "component", "asynq") }
