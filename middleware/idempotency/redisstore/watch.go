package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/middleware/idempotency"
)

// All watches of a Store share one pub/sub connection, read by one goroutine.
// Watch returns once a marker channel of its own, subscribed after its record's
// channel, is confirmed. Messages lost during a reconnect cost latency only.
// Design: docs/design/redis-store.md#watches

// confirmTimeout bounds how long Watch waits for its subscription.
const confirmTimeout = 5 * time.Second

var errNotConfirmed = errors.New("subscription not confirmed in time")

type watch struct {
	c chan struct{}
}

// channel is where the scripts publish changes of scope's record.
func (s *Store) channel(scope idempotency.Scope) string {
	return s.key(scope) + ":changed"
}

// Watch implements idempotency.Watcher: changed receives a value whenever
// scope's record was completed, released, held as unknown or resolved, until
// stop is called or ctx ends. Values coalesce: one pending value stands for
// any number of changes.
func (s *Store) Watch(ctx context.Context, scope idempotency.Scope) (<-chan struct{}, func(), error) {
	channel := s.channel(scope)
	w := &watch{c: make(chan struct{}, 1)}
	ready := make(chan struct{})

	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, nil, ErrClosed
	}
	if s.ps == nil {
		s.startLocked()
	}
	s.seq++
	// Markers live on this connection only; a counter keeps them apart.
	marker := s.prefix + "idem:watch:" + strconv.FormatUint(s.seq, 10)
	s.markers[marker] = ready
	subscribe := []string{marker}
	set := s.channels[channel]
	if set == nil {
		set = make(map[*watch]struct{})
		s.channels[channel] = set
		subscribe = []string{channel, marker}
	}
	set[w] = struct{}{}
	err := s.ps.Subscribe(ctx, subscribe...)
	s.mu.Unlock()

	stop := sync.OnceFunc(func() { s.unwatch(channel, w) })
	if err == nil {
		timer := time.NewTimer(confirmTimeout)
		select {
		case <-ready:
		case <-ctx.Done():
			err = ctx.Err()
		case <-s.done:
			err = ErrClosed
		case <-timer.C:
			err = errNotConfirmed
		}
		timer.Stop()
	}
	s.dropMarker(ctx, marker)
	if err == nil {
		// Subscribed first, marked second: an end that sees the mark
		// publishes to a subscription already there, and an end before
		// the mark is seen by the caller's next read.
		_, err = roundTrip(ctx, &s.flights, func(ctx context.Context) (any, error) {
			return s.scripts.watch.Run(ctx, s.client, []string{s.key(scope)}).Result()
		})
	}
	if err != nil {
		stop()
		return nil, nil, fmt.Errorf("redisstore: watch: %w", err)
	}
	unhook := context.AfterFunc(ctx, stop)
	return w.c, func() { unhook(); stop() }, nil
}

// startLocked opens the shared subscription and starts its reader. s.mu is
// held.
func (s *Store) startLocked() {
	// No channels yet: nothing is sent until the first Subscribe.
	s.ps = s.client.Subscribe(context.Background())
	msgs := s.ps.ChannelWithSubscriptions()
	s.wg.Go(func() { s.fanOut(msgs) })
}

// fanOut runs until the PubSub is closed (Close), which closes msgs.
func (s *Store) fanOut(msgs <-chan any) {
	for m := range msgs {
		switch m := m.(type) {
		case *redis.Message:
			s.mu.Lock()
			for w := range s.channels[m.Channel] {
				select {
				case w.c <- struct{}{}:
				default: // a value is already pending
				}
			}
			s.mu.Unlock()
		case *redis.Subscription:
			if m.Kind != "subscribe" {
				continue
			}
			s.mu.Lock()
			if ready, ok := s.markers[m.Channel]; ok {
				delete(s.markers, m.Channel)
				close(ready)
			}
			s.mu.Unlock()
		}
	}
}

// dropMarker forgets a marker whether or not it was confirmed.
func (s *Store) dropMarker(ctx context.Context, marker string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.markers, marker)
	if !s.closed {
		// A failed write means a reconnect, which no longer includes it.
		_ = s.ps.Unsubscribe(context.WithoutCancel(ctx), marker)
	}
}

func (s *Store) unwatch(channel string, w *watch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	set := s.channels[channel]
	delete(set, w)
	if len(set) > 0 {
		return
	}
	delete(s.channels, channel)
	if !s.closed {
		_ = s.ps.Unsubscribe(context.Background(), channel)
	}
}

// Close stops the shared subscription, if Watch opened one, and waits for
// its reader, and for the round trips whose callers gave up before their
// reply came: those end with the reply or the client's read timeout. Watches
// still open receive nothing more; every other call still works. The Redis
// client is not closed.
func (s *Store) Close() error {
	defer s.flights.wait()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.done)
	ps := s.ps
	s.mu.Unlock()
	if ps == nil {
		return nil
	}
	err := ps.Close()
	s.wg.Wait()
	if err != nil {
		return fmt.Errorf("redisstore: close: %w", err)
	}
	return nil
}
