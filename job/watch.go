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

// Channel is the LISTEN/NOTIFY channel on which the jobs table announces
// every change of a job's document, with the job's id as the payload (the
// trigger jobs_notify, migration 00014).
const Channel = "idemgate_jobs"

// Defaults of WatcherOptions.
const (
	DefaultWatchPoll  = time.Second
	DefaultWatchBatch = 1000
)

// Listener timing, as the idempotency store's listener: the backoff starts
// short because a dropped connection is usually a restarted backend that
// is back at once.
const (
	watchMinBackoff     = 100 * time.Millisecond
	watchMaxBackoff     = 5 * time.Second
	watchConnectTimeout = 10 * time.Second
	watchIdleCheck      = 30 * time.Second
	watchPingTimeout    = 5 * time.Second
	watchProbeTimeout   = 5 * time.Second
	// watchDueSlack is how long after a scheduled job's not_before its
	// document is read again: the read must find now() past it.
	watchDueSlack = 20 * time.Millisecond
)

// WatcherOptions configures a Watcher. A zero field takes its default.
type WatcherOptions struct {
	// Connect opens the listener's connection: a session of its own on the
	// database, never one through a transaction pooler (idemgate:
	// database_direct_url, else a connection taken out of the pool). Nil:
	// no listener; every change is found by polling.
	Connect func(ctx context.Context) (*pgx.Conn, error)
	// Poll is the time between two reads of the watched jobs while no
	// listener is connected. Default DefaultWatchPoll, 1s.
	Poll time.Duration
	// Batch is the most jobs one read asks for. Default DefaultWatchBatch.
	Batch int
	// Logger gets a line when the listener connects, is lost, or finds it
	// cannot hear notifications. Default slog.Default().
	Logger *slog.Logger
}

func (o WatcherOptions) withDefaults() WatcherOptions {
	if o.Poll <= 0 {
		o.Poll = DefaultWatchPoll
	}
	if o.Batch <= 0 {
		o.Batch = DefaultWatchBatch
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// Watcher tells the callers waiting on jobs when their documents change,
// for GET /v1/jobs/{id}?wait=. One connection LISTENs on Channel for the
// whole process; a notification marks its job for a read, and one query
// (WHERE id = ANY($1)) reads every marked job for all their watchers at
// once, so a thousand callers waiting on one job cost one read per change,
// not a thousand. While no listener is connected (the database restarts,
// or notifications cannot reach it through a pooler), the same query reads
// every watched job each Poll, so no wait outlives its change by more than
// Poll.
type Watcher struct {
	db   DB
	opts WatcherOptions

	mu      sync.Mutex
	watches map[string]map[*Watch]struct{}
	due     map[string]struct{}    // to read at the next pass
	polled  map[string]struct{}    // watched jobs whose row could not be flagged: read each Poll
	timers  map[string]*time.Timer // a scheduled job's read at its time
	kick    chan struct{}          // buffered 1: a pass is wanted
	hearing atomic.Bool            // the listener is connected and hears
	reads   atomic.Int64           // queries run
}

// NewWatcher returns a Watcher that reads jobs on db. Run it.
func NewWatcher(db DB, opts WatcherOptions) *Watcher {
	return &Watcher{
		db: db, opts: opts.withDefaults(),
		watches: map[string]map[*Watch]struct{}{},
		due:     map[string]struct{}{},
		polled:  map[string]struct{}{},
		timers:  map[string]*time.Timer{},
		kick:    make(chan struct{}, 1),
	}
}

// Watch is one caller's interest in one job.
type Watch struct {
	w  *Watcher
	id string
	ch chan struct{} // buffered 1: a pending signal absorbs later ones

	mu     sync.Mutex
	latest Row
	seen   bool
}

// Changed receives a value when Latest may have changed.
func (x *Watch) Changed() <-chan struct{} { return x.ch }

// Latest returns the job as last read for the watchers of its id, and
// false before the first read.
func (x *Watch) Latest() (Row, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.latest, x.seen
}

// Stop ends the watch. It may be called more than once, and on a nil
// Watch.
func (x *Watch) Stop() {
	if x == nil {
		return
	}
	w := x.w
	w.mu.Lock()
	defer w.mu.Unlock()
	set := w.watches[x.id]
	delete(set, x)
	if len(set) == 0 {
		delete(w.watches, x.id)
		delete(w.polled, x.id)
		if t := w.timers[x.id]; t != nil {
			t.Stop()
			delete(w.timers, x.id)
		}
	}
}

func (x *Watch) offer(r Row) {
	x.mu.Lock()
	x.latest, x.seen = r, true
	x.mu.Unlock()
	select {
	case x.ch <- struct{}{}:
	default:
	}
}

// Watch starts watching job id: the job is read after each change, for
// all its watches at once, and Changed signals each read. Start watching
// before reading the job yourself, then hand that read to Seen: a change
// committed after the watch began is signalled, one committed before is
// in the caller's own read, and no read is spent on the start of a watch.
// The caller compares what Latest returns with what it has, and calls
// Stop when done.
//
// A job's changes are announced only once its row is flagged as watched
// (migration 00016: an announcement serialises commits, so the jobs
// nobody waits for make none). Watch flags it, once per job, before it
// returns; a change committed after that is announced. When the flag
// cannot be written (the database unreachable), the job is read each
// Poll instead, for as long as it is watched.
func (w *Watcher) Watch(ctx context.Context, id string) *Watch {
	x := &Watch{w: w, id: id, ch: make(chan struct{}, 1)}
	w.mu.Lock()
	set := w.watches[id]
	if set == nil {
		set = map[*Watch]struct{}{}
		w.watches[id] = set
	}
	set[x] = struct{}{}
	w.mu.Unlock()
	if !Storable(id) {
		return x // no row can have it: nothing will change
	}
	if _, err := w.db.Exec(ctx, `UPDATE jobs SET watched = true WHERE id = $1 AND NOT watched`, id); err != nil {
		w.opts.Logger.Warn("job: watcher: flagging the job as watched failed; it is polled instead", "job_id", id, "err", err)
		w.mu.Lock()
		if _, ok := w.watches[id]; ok {
			w.polled[id] = struct{}{}
		}
		w.mu.Unlock()
	}
	return x
}

// Seen tells the watcher what the caller read of the job after the watch
// began. A scheduled job's document changes at its time without a write,
// so nothing notifies it: the watcher reads it then.
func (x *Watch) Seen(r Row) {
	x.w.mu.Lock()
	defer x.w.mu.Unlock()
	if _, ok := x.w.watches[x.id]; ok {
		x.w.scheduleLocked(r)
	}
}

// scheduleLocked sets the read of a scheduled job at its time, once per
// job. w.mu is held.
func (w *Watcher) scheduleLocked(r Row) {
	if r.Status != StatusScheduled || r.NotBefore == nil || w.timers[r.ID] != nil {
		return
	}
	id := r.ID
	var t *time.Timer
	t = time.AfterFunc(time.Until(*r.NotBefore)+watchDueSlack, func() {
		w.mu.Lock() // held by the caller until t is set
		if w.timers[id] == t {
			delete(w.timers, id)
		}
		w.mu.Unlock()
		w.mark(id)
	})
	w.timers[id] = t
}

// Listening reports whether the listener is connected and hears the
// notifications; while it is not, changes are found by polling.
func (w *Watcher) Listening() bool { return w.hearing.Load() }

// Reads is the number of queries the Watcher has run to read jobs.
func (w *Watcher) Reads() int64 { return w.reads.Load() }

func (w *Watcher) wake() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// mark makes id due for the next pass if anyone watches it.
func (w *Watcher) mark(id string) {
	w.mu.Lock()
	_, watched := w.watches[id]
	if watched {
		w.due[id] = struct{}{}
	}
	w.mu.Unlock()
	if watched {
		w.wake()
	}
}

// markAll makes every watched job due: after a reconnection (what was
// notified meanwhile is lost) and on each poll without a listener.
func (w *Watcher) markAll() {
	w.mu.Lock()
	for id := range w.watches {
		w.due[id] = struct{}{}
	}
	n := len(w.due)
	w.mu.Unlock()
	if n > 0 {
		w.wake()
	}
}

// markPolled makes due the watched jobs whose row could not be flagged.
func (w *Watcher) markPolled() {
	w.mu.Lock()
	for id := range w.polled {
		w.due[id] = struct{}{}
	}
	n := len(w.polled)
	w.mu.Unlock()
	if n > 0 {
		w.wake()
	}
}

// Run listens and reads until ctx ends; it returns nil then. Run it once,
// in a goroutine its owner waits for.
func (w *Watcher) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	if w.opts.Connect != nil {
		wg.Go(func() { w.listen(ctx) })
	}
	w.read(ctx)
	wg.Wait()
	w.mu.Lock()
	for id, t := range w.timers {
		t.Stop()
		delete(w.timers, id)
	}
	w.mu.Unlock()
	return nil
}

// read runs a pass whenever one is wanted, and each Poll: every watched
// job while the listener does not hear, else only the jobs marked due (a
// pass that failed leaves its jobs due).
func (w *Watcher) read(ctx context.Context) {
	tick := time.NewTicker(w.opts.Poll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.kick:
		case <-tick.C:
			if !w.hearing.Load() {
				w.markAll()
			} else {
				w.markPolled()
			}
		}
		w.pass(ctx)
	}
}

// pass reads the due jobs, Batch at a time, and hands each to its
// watchers.
func (w *Watcher) pass(ctx context.Context) {
	w.mu.Lock()
	ids := make([]string, 0, len(w.due))
	for id := range w.due {
		ids = append(ids, id)
	}
	clear(w.due)
	w.mu.Unlock()
	for len(ids) > 0 {
		n := min(len(ids), w.opts.Batch)
		chunk := ids[:n]
		ids = ids[n:]
		recs, err := w.readJobs(ctx, chunk)
		if err != nil {
			// Due again: the next poll (or pass) reads them.
			w.mu.Lock()
			for _, id := range append(chunk, ids...) {
				if _, ok := w.watches[id]; ok {
					w.due[id] = struct{}{}
				}
			}
			w.mu.Unlock()
			if ctx.Err() == nil {
				w.opts.Logger.Warn("job: watcher: reading the watched jobs failed; the next poll reads them again", "err", err)
			}
			return
		}
		w.deliver(recs)
	}
}

func (w *Watcher) readJobs(ctx context.Context, ids []string) ([]Row, error) {
	w.reads.Add(1)
	rows, err := w.db.Query(ctx, `SELECT `+recordColumns+` FROM jobs WHERE id = ANY($1)`, ids)
	if err != nil {
		return nil, fmt.Errorf("job: watched jobs: %w", err)
	}
	defer rows.Close()
	var out []Row
	for rows.Next() {
		j, err := scanRecord(rows)
		if err != nil {
			return nil, fmt.Errorf("job: watched jobs: %w", err)
		}
		out = append(out, j)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("job: watched jobs: %w", err)
	}
	return out, nil
}

// deliver hands each record to the watchers of its id (and sets the read
// of one still scheduled at its time).
func (w *Watcher) deliver(recs []Row) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, r := range recs {
		set := w.watches[r.ID]
		for x := range set {
			x.offer(r)
		}
		if len(set) > 0 {
			w.scheduleLocked(r)
		}
	}
}

// listen keeps one connection LISTENing on Channel and marks the job of
// each notification, until ctx ends or it finds that notifications cannot
// reach its connection: then it stops for good and the watched jobs are
// polled.
func (w *Watcher) listen(ctx context.Context) {
	backoff := watchMinBackoff
	for {
		conn, err := w.connect(ctx)
		if errors.Is(err, pglisten.ErrNotDelivered) {
			w.opts.Logger.Warn("job: watcher: notifications cannot reach the listener: its connection goes through a "+
				"transaction pooler; waits on jobs find their changes by polling. "+
				"Give the listener a direct connection to the database (idemgate: database_direct_url)", "err", err)
			return
		}
		if err == nil {
			w.hearing.Store(true)
			// Whatever was notified while no connection listened is lost.
			w.markAll()
			up := time.Now()
			err = w.receive(ctx, conn)
			w.hearing.Store(false)
			closeCtx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = conn.Close(closeCtx)
			cancel()
			if time.Since(up) > watchMaxBackoff {
				backoff = watchMinBackoff
			}
			// The watched jobs are polled until the listener is back.
			w.markAll()
		}
		if ctx.Err() != nil {
			return
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		w.opts.Logger.Warn("job: watcher: listener not connected; polling the watched jobs meanwhile", "err", err, "retry_in", wait)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		backoff = min(2*backoff, watchMaxBackoff)
	}
}

// connect opens the listener's connection, checks that notifications
// sent on the database reach it, and LISTENs.
func (w *Watcher) connect(ctx context.Context) (*pgx.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, watchConnectTimeout)
	defer cancel()
	conn, err := w.opts.Connect(ctx)
	if err != nil {
		return nil, fmt.Errorf("job: watcher: connect: %w", err)
	}
	if err := pglisten.Listen(ctx, conn, w.db, Channel, "idemgate_jobs_probe_", watchProbeTimeout); err != nil {
		closeCtx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = conn.Close(closeCtx)
		return nil, fmt.Errorf("job: watcher: %w", err)
	}
	return conn, nil
}

// receive returns when the connection fails or ctx ends. An idle
// connection is pinged, so that one that died silently is noticed.
func (w *Watcher) receive(ctx context.Context, conn *pgx.Conn) error {
	for {
		wctx, cancel := context.WithTimeout(ctx, watchIdleCheck)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case err == nil:
			if n.Channel == Channel {
				w.mark(n.Payload)
			}
			continue
		case ctx.Err() != nil:
			return ctx.Err()
		case !pgconn.Timeout(err) && !errors.Is(err, context.DeadlineExceeded):
			return err
		}
		pctx, cancel := context.WithTimeout(ctx, watchPingTimeout)
		err = conn.Ping(pctx)
		cancel()
		if err != nil {
			return fmt.Errorf("job: watcher: ping: %w", err)
		}
	}
}
