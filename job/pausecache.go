package job

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemgate/idemgate/pglisten"
)

// DefaultPausePoll is PauseCacheOptions.Poll's default.
const DefaultPausePoll = 2 * time.Second

// PauseCacheOptions configure a PauseCache.
type PauseCacheOptions struct {
	// Connect opens the connection the cache LISTENs on. Default nil:
	// the cache only polls.
	Connect func(ctx context.Context) (*pgx.Conn, error)
	// Poll is how often the cache reads the pauses whatever it hears.
	// Default DefaultPausePoll, 2s.
	Poll time.Duration
	// Logger receives the failures to read or listen. Default: discarded.
	Logger *slog.Logger
	// Float returns a number in [0, 1), which decides the deliveries a
	// ramp admits. Default math/rand/v2.Float64.
	Float func() float64
	// Now is the clock pauses end on. Default time.Now.
	Now func() time.Time
}

// PauseCache is a worker's copy of the pauses in force: each delivery
// asks it, in memory, whether its task, queue or a limit key value is
// paused, and no delivery reads the database for it.
//
// The copy is read again at once when the pauses table NOTIFYs a change
// (PauseChannel), and every Poll in any case, so a pause reaches every
// worker within about Poll when notifications do not come (a transaction
// pooler, a listener reconnecting), and at once when they do.
type PauseCache struct {
	store *Pauses
	opts  PauseCacheOptions
	// pauses is the copy, by target; it is replaced, never changed.
	pauses atomic.Pointer[map[PauseTarget]Pause]
	kick   chan struct{}
	reads  atomic.Int64
}

// NewPauseCache returns a cache of store's pauses. Run it; until its first
// read nothing is paused.
func NewPauseCache(store *Pauses, opts PauseCacheOptions) *PauseCache {
	if opts.Poll <= 0 {
		opts.Poll = DefaultPausePoll
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Float == nil {
		opts.Float = rand.Float64
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	c := &PauseCache{store: store, opts: opts, kick: make(chan struct{}, 1)}
	c.pauses.Store(&map[PauseTarget]Pause{})
	return c
}

// Store is the store the cache reads.
func (c *PauseCache) Store() *Pauses { return c.store }

// Reads is how many times the cache has read the table.
func (c *PauseCache) Reads() int64 { return c.reads.Load() }

// Paused returns the pause that sends back a delivery of task on queue
// whose flow limits render limits (targets of kind PauseLimit), if one
// does: a pause in force, or a ramp that does not admit this delivery.
func (c *PauseCache) Paused(task, queue string, limits []PauseTarget) (Pause, bool) {
	m := *c.pauses.Load()
	if len(m) == 0 {
		return Pause{}, false
	}
	now := c.opts.Now()
	check := func(t PauseTarget) (Pause, bool) {
		p, ok := m[t]
		if !ok {
			return p, false
		}
		share := p.Admits(now)
		return p, share < 1 && (share <= 0 || c.opts.Float() >= share)
	}
	if p, ok := check(PauseTarget{Kind: PauseTask, Name: task}); ok {
		return p, true
	}
	if p, ok := check(PauseTarget{Kind: PauseQueue, Name: queue}); ok {
		return p, true
	}
	if base := BaseQueue(queue); base != queue {
		if p, ok := check(PauseTarget{Kind: PauseQueue, Name: base}); ok {
			return p, true
		}
	}
	for _, t := range limits {
		if p, ok := check(t); ok {
			return p, true
		}
	}
	return Pause{}, false
}

// OpenBreakers counts the limit key values each limit's breaker holds
// paused now, by limit.
func (c *PauseCache) OpenBreakers() map[string]int {
	now := c.opts.Now()
	out := map[string]int{}
	for t, p := range *c.pauses.Load() {
		if t.Kind == PauseLimit && p.By == BreakerActor && p.Admits(now) < 1 {
			out[t.Name]++
		}
	}
	return out
}

// OpenBreaker pauses one key value of a limit for d, by BreakerActor,
// after failures consecutive failed attempts within window, and records
// it in the audit trail. A pause of the value already in force stands:
// opened is false then. The cache reads the pauses again at once.
func (c *PauseCache) OpenBreaker(ctx context.Context, limit, key string, failures int, window, d time.Duration) (p Pause, opened bool, err error) {
	p = Pause{
		Target: PauseTarget{Kind: PauseLimit, Name: limit, Key: key},
		Until:  c.opts.Now().Add(d),
		By:     BreakerActor,
		Reason: fmt.Sprintf("%d consecutive failures within %s", failures, shortDuration(window)),
	}
	p, opened, err = c.store.PauseIfNone(ctx, p)
	if err != nil || !opened {
		return p, opened, err
	}
	c.Refresh()
	_, err = NewStore(c.store.db).RecordAction(ctx, Action{Actor: BreakerActor, Action: "pause", Via: "breaker",
		Filter: p.Target.String(), Reason: p.Reason}, nil)
	return p, true, err
}

// Refresh asks Run for a read now.
func (c *PauseCache) Refresh() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// Load reads the pauses in force into the cache once.
func (c *PauseCache) Load(ctx context.Context) error {
	c.reads.Add(1)
	list, err := c.store.read(ctx)
	if err != nil {
		return err
	}
	m := make(map[PauseTarget]Pause, len(list))
	for _, p := range list {
		m[p.Target] = p
	}
	c.pauses.Store(&m)
	return nil
}

// Run keeps the cache up to date until ctx ends; it returns nil then. Run
// it once, in a goroutine its owner waits for.
func (c *PauseCache) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	if c.opts.Connect != nil {
		wg.Go(func() { c.listen(ctx) })
	}
	defer wg.Wait()
	tick := time.NewTicker(c.opts.Poll)
	defer tick.Stop()
	for {
		rctx, cancel := context.WithTimeout(ctx, max(c.opts.Poll, time.Second))
		err := c.Load(rctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			c.opts.Logger.Warn("job: pauses: reading them failed; the next poll tries again", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-c.kick:
		case <-tick.C:
		}
	}
}

// listen LISTENs on PauseChannel and asks for a read at each change,
// reconnecting after a failure, until ctx ends or notifications are found
// not to reach it (the poll alone serves then).
func (c *PauseCache) listen(ctx context.Context) {
	backoff := time.Second
	for {
		conn, err := c.connect(ctx)
		if errors.Is(err, pglisten.ErrNotDelivered) {
			c.opts.Logger.Warn("job: pauses: notifications cannot reach the listener (a transaction pooler); pauses are polled", "poll", c.opts.Poll)
			return
		}
		if err == nil {
			c.Refresh() // what changed while no one listened
			err = c.receive(ctx, conn)
			closeCtx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = conn.Close(closeCtx)
			cancel()
		}
		if ctx.Err() != nil {
			return
		}
		c.opts.Logger.Warn("job: pauses: listener not connected; polling meanwhile", "err", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 30*time.Second)
	}
}

func (c *PauseCache) connect(ctx context.Context) (*pgx.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := c.opts.Connect(ctx)
	if err != nil {
		return nil, fmt.Errorf("job: pauses: connect: %w", err)
	}
	if err := pglisten.Listen(ctx, conn, c.store.db, PauseChannel, "idemgate_pauses_probe_", 5*time.Second); err != nil {
		closeCtx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = conn.Close(closeCtx)
		return nil, fmt.Errorf("job: pauses: %w", err)
	}
	return conn, nil
}

func (c *PauseCache) receive(ctx context.Context, conn *pgx.Conn) error {
	for {
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case err == nil:
			if n.Channel == PauseChannel {
				c.Refresh()
			}
			continue
		case ctx.Err() != nil:
			return ctx.Err()
		case !pgconn.Timeout(err) && !errors.Is(err, context.DeadlineExceeded):
			return err
		}
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err = conn.Ping(pctx)
		cancel()
		if err != nil {
			return fmt.Errorf("job: pauses: ping: %w", err)
		}
	}
}
