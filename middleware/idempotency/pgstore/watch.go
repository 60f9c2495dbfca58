package pgstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/pglisten"
)

// Listener timing. The backoff is short at first because a dropped
// connection is usually a restarted backend that is back at once.
const (
	minBackoff     = 100 * time.Millisecond
	maxBackoff     = 5 * time.Second
	connectTimeout = 10 * time.Second
	// idleCheck is how long the listener waits for a notification before it
	// pings, so that a connection that died silently is noticed.
	idleCheck   = 30 * time.Second
	pingTimeout = 5 * time.Second
	// deliveryTimeout bounds the check that notifications reach the
	// listener. On a direct connection the test notification is back in
	// one round trip.
	deliveryTimeout = 5 * time.Second
)

type watcher struct {
	ch chan struct{} // buffered 1: a pending wake-up absorbs later ones
}

func (w *watcher) wake() {
	select {
	case w.ch <- struct{}{}:
	default:
	}
}

// Watch returns a channel that receives a value when the record for scope
// may have changed: it was completed, released, held as unknown, resolved
// or deleted, in this process or any other on the same database. It also
// receives one whenever the Store's listener connection is (re)established,
// because notifications sent while it was away are lost; the first Watch
// opens that connection, so its channel fires once early. A receiver
// re-reads the record and must not take a value as proof of a change.
//
// Watch marks the record as watched, in the database, so that its end is
// notified: Complete, Release and MarkUnknown send a NOTIFY only for a
// watched record, because a NOTIFY serialises commits database-wide. A
// record not in flight is not marked; it has already ended, and the
// caller's next read sees that.
//
// Watch does not wait for the listener: while the database is unreachable
// the channel stays quiet and the caller's polling carries on. So it does
// for good once the listener found that notifications cannot reach it (a
// transaction pooler between the Store and the database; see
// WithListenConfig): Watch then no longer marks records, since nobody
// would hear their end.
func (s *Store) Watch(ctx context.Context, scope idempotency.Scope) (<-chan struct{}, func(), error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, fmt.Errorf("pgstore: watch: %w", err)
	}
	id := scopeID(scope)
	w := &watcher{ch: make(chan struct{}, 1)}

	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, nil, ErrClosed
	}
	set := s.watchers[id]
	if set == nil {
		set = make(map[*watcher]struct{}, 1)
		s.watchers[id] = set
	}
	set[w] = struct{}{}
	if !s.started {
		// The listener lives as long as the Store, not as this caller's ctx.
		lctx, cancel := context.WithCancel(context.Background())
		s.started, s.cancel = true, cancel
		s.wg.Add(1)
		go s.listen(lctx)
	}
	s.mu.Unlock()

	// Marked after the watcher is registered: an end that sees the mark
	// notifies, and an end that committed before it is seen by the
	// caller's next read. A failed mark leaves the caller to its polling.
	if s.deaf.Load() {
		// Nothing would hear the notification: the caller polls.
	} else if _, err := s.pool.Exec(ctx, watchSQL, scope.Tenant, scope.Route, scope.Key); err != nil && ctx.Err() == nil {
		s.log.Warn("pgstore: watch: record not marked; its end is found by polling", "err", err)
	}

	unwatch := func() { s.unwatch(id, w) }
	stopAfter := context.AfterFunc(ctx, unwatch)
	stop := func() {
		stopAfter()
		unwatch()
	}
	return w.ch, stop, nil
}

const watchSQL = `
UPDATE idempotency_records SET watched = true
WHERE tenant = $1 AND route = $2 AND key = $3 AND state = 'in_flight' AND NOT watched`

// unwatch is idempotent: stop and the end of ctx may both call it.
func (s *Store) unwatch(id string, w *watcher) {
	s.mu.Lock()
	defer s.mu.Unlock()
	set := s.watchers[id]
	delete(set, w)
	if len(set) == 0 {
		delete(s.watchers, id)
	}
}

// Close stops the listener connection and waits for its goroutine. Watch
// channels then stay quiet; the pool is left open. Batches run on their
// callers' goroutines, so there is nothing of theirs to stop, and the
// Store's other calls still work. Close may be called more than once.
func (s *Store) Close() {
	s.mu.Lock()
	s.closed = true
	cancel := s.cancel
	s.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	s.wg.Wait()
}

// listen keeps one connection LISTENing and fans its notifications out to
// the watchers, until ctx ends, or until it finds that notifications
// cannot reach its connection: then it stops for good and the watchers'
// callers find every end by polling.
func (s *Store) listen(ctx context.Context) {
	defer s.wg.Done()
	backoff := minBackoff
	for {
		conn, err := s.connectListener(ctx)
		if errors.Is(err, pglisten.ErrNotDelivered) {
			s.deaf.Store(true)
			s.log.Warn("pgstore: notifications cannot reach the listener: its connection goes through a "+
				"transaction pooler; duplicates waiting for a request in flight find its end by polling. "+
				"Give the listener a direct connection to the database (WithListenConfig; idemgate: database_direct_url)",
				"err", err)
			return
		}
		if err == nil {
			s.pid.Store(conn.PgConn().PID())
			// Whatever was notified while no connection listened is lost.
			s.wakeAll()
			up := time.Now()
			err = s.receive(ctx, conn)
			s.pid.Store(0)
			closeCtx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = conn.Close(closeCtx)
			cancel()
			if time.Since(up) > maxBackoff {
				backoff = minBackoff // it was healthy for a while: not a flapping database
			}
		}
		if ctx.Err() != nil {
			return
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		s.log.Warn("pgstore: listener not connected; retrying", "err", err, "retry_in", wait)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// connectListener opens the listener's connection: with the
// WithListenConfig configuration when there is one, else by taking a
// connection out of the pool for good, so it runs the pool's connect hooks
// yet does not occupy one of its slots. Its error wraps
// pglisten.ErrNotDelivered when the connection took the LISTEN but cannot
// receive notifications.
func (s *Store) connectListener(ctx context.Context) (*pgx.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	var conn *pgx.Conn
	if s.listenConfig != nil {
		c, err := pgx.ConnectConfig(ctx, s.listenConfig)
		if err != nil {
			return nil, fmt.Errorf("pgstore: listener: %w", err)
		}
		conn = c
	} else {
		pc, err := s.pool.Acquire(ctx)
		if err != nil {
			return nil, fmt.Errorf("pgstore: listener: %w", err)
		}
		conn = pc.Hijack()
	}
	if err := pglisten.Listen(ctx, conn, s.pool, s.channel, "pgstore_probe_", deliveryTimeout); err != nil {
		closeCtx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = conn.Close(closeCtx)
		return nil, fmt.Errorf("pgstore: listener: %w", err)
	}
	return conn, nil
}

// receive returns when the connection fails or ctx ends.
func (s *Store) receive(ctx context.Context, conn *pgx.Conn) error {
	for {
		wctx, cancel := context.WithTimeout(ctx, idleCheck)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case err == nil:
			if n != nil && n.Channel == s.channel {
				s.dispatch(n.Payload)
			}
			continue
		case ctx.Err() != nil:
			return ctx.Err()
		case !pgconn.Timeout(err) && !errors.Is(err, context.DeadlineExceeded):
			return err
		}
		pctx, cancel := context.WithTimeout(ctx, pingTimeout)
		err = conn.Ping(pctx)
		cancel()
		if err != nil {
			return fmt.Errorf("pgstore: listener: ping: %w", err)
		}
	}
}

func (s *Store) dispatch(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for w := range s.watchers[id] {
		w.wake()
	}
}

func (s *Store) wakeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, set := range s.watchers {
		for w := range set {
			w.wake()
		}
	}
}
