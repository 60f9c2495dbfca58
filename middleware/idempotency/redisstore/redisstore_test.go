package redisstore_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/middleware/idempotency/idempotencytest"
	"github.com/idemgate/idemgate/middleware/idempotency/redisstore"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// newStore returns a store on rdb under a prefix of its own; its keys are
// deleted and its subscription closed when the test ends.
func newStore(t *testing.T, rdb redis.UniversalClient) (*redisstore.Store, string) {
	t.Helper()
	prefix := testkit.Prefix()
	s := redisstore.New(rdb, redisstore.WithPrefix(prefix))
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		deleteKeys(t, rdb, prefix)
	})
	return s, prefix
}

func TestConformance(t *testing.T) {
	rdb := testkit.Redis(t)
	idempotencytest.Run(t, func(t *testing.T) idempotency.Store {
		s, _ := newStore(t, rdb)
		return s
	})
}

func TestConformanceCluster(t *testing.T) {
	rdb := testkit.RedisCluster(t)
	idempotencytest.Run(t, func(t *testing.T) idempotency.Store {
		s, _ := newStore(t, rdb)
		return s
	})
}

// scanKeys returns the keys under prefix on every primary.
func scanKeys(t testing.TB, rdb redis.UniversalClient, prefix string) []string {
	t.Helper()
	ctx := context.Background()
	var keys []string
	scan := func(ctx context.Context, c *redis.Client) error {
		it := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for it.Next(ctx) {
			keys = append(keys, it.Val())
		}
		return it.Err()
	}
	var err error
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		var mu sync.Mutex // ForEachMaster runs the nodes concurrently
		err = c.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			return scan(ctx, c)
		})
	case *redis.Client:
		err = scan(ctx, c)
	default:
		t.Fatalf("scanKeys: unsupported client %T", rdb)
	}
	if err != nil {
		t.Fatalf("scan %s*: %v", prefix, err)
	}
	return keys
}

func deleteKeys(t testing.TB, rdb redis.UniversalClient, prefix string) {
	t.Helper()
	for _, k := range scanKeys(t, rdb, prefix) {
		if err := rdb.Del(context.Background(), k).Err(); err != nil {
			t.Errorf("delete %s: %v", k, err)
		}
	}
}

// onlyKey returns the single key the store wrote under prefix.
func onlyKey(t *testing.T, rdb redis.UniversalClient, prefix string) string {
	t.Helper()
	keys := scanKeys(t, rdb, prefix)
	if len(keys) != 1 {
		t.Fatalf("keys under %s: %q, want exactly one", prefix, keys)
	}
	return keys[0]
}

func scope(name string) idempotency.Scope {
	return idempotency.Scope{Tenant: "acme", Route: "payments", Key: name}
}

func claim(t *testing.T, s idempotency.Store, sc idempotency.Scope, owner string, lease, retention time.Duration) {
	t.Helper()
	res, err := s.Claim(t.Context(), idempotency.ClaimRequest{Scope: sc, Fingerprint: "fp", Owner: owner, Lease: lease, Retention: retention})
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	if !res.Claimed {
		t.Fatalf("Claim: not claimed: %+v", res.Record)
	}
}

// TestKeyTTL checks that no state leaves an immortal key: Redis itself must
// reclaim every record, including abandoned claims and held outcomes.
func TestKeyTTL(t *testing.T) {
	rdb := testkit.Redis(t)
	const (
		lease     = 30 * time.Second
		retention = time.Hour
	)
	resp := idempotency.Response{Status: http.StatusOK, Header: http.Header{"Content-Type": {"text/plain"}}, Body: []byte("ok")}
	tests := []struct {
		name string
		end  func(ctx context.Context, s *redisstore.Store, sc idempotency.Scope, owner string) error
		// minTTL and maxTTL bound the key's PTTL after end.
		minTTL, maxTTL time.Duration
	}{
		{"in_flight", nil, retention - time.Minute, retention},
		{"completed", func(ctx context.Context, s *redisstore.Store, sc idempotency.Scope, owner string) error {
			return s.Complete(ctx, sc, owner, resp, 10*time.Minute)
		}, 9 * time.Minute, 10 * time.Minute},
		{"released", func(ctx context.Context, s *redisstore.Store, sc idempotency.Scope, owner string) error {
			return s.Release(ctx, sc, owner)
		}, retention - time.Minute, retention},
		{"unknown", func(ctx context.Context, s *redisstore.Store, sc idempotency.Scope, owner string) error {
			return s.MarkUnknown(ctx, sc, owner)
		}, retention - time.Minute, retention},
		{"resolved", func(ctx context.Context, s *redisstore.Store, sc idempotency.Scope, owner string) error {
			if err := s.MarkUnknown(ctx, sc, owner); err != nil {
				return err
			}
			return s.Resolve(ctx, sc)
		}, retention - time.Minute, retention},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, prefix := newStore(t, rdb)
			sc := scope(tc.name)
			claim(t, s, sc, "owner-1", lease, retention)
			if tc.end != nil {
				if err := tc.end(t.Context(), s, sc, "owner-1"); err != nil {
					t.Fatal(err)
				}
			}
			rec, err := s.Get(t.Context(), sc)
			if err != nil {
				t.Fatalf("Get: %v", err)
			}
			ttl := pttl(t, rdb, onlyKey(t, rdb, prefix))
			if ttl < tc.minTTL || ttl > tc.maxTTL {
				t.Fatalf("state %s: key TTL %v, want between %v and %v", rec.State, ttl, tc.minTTL, tc.maxTTL)
			}
			// The reported expiry is the key's.
			if d := time.Until(rec.ExpiresAt) - ttl; d < -5*time.Second || d > 5*time.Second {
				t.Fatalf("ExpiresAt %v is %v away from the key TTL %v", rec.ExpiresAt, d, ttl)
			}
		})
	}
}

func pttl(t *testing.T, rdb redis.UniversalClient, key string) time.Duration {
	t.Helper()
	ttl, err := rdb.PTTL(t.Context(), key).Result()
	if err != nil {
		t.Fatalf("PTTL %s: %v", key, err)
	}
	if ttl <= 0 {
		t.Fatalf("key %s has no TTL (PTTL %v)", key, ttl)
	}
	return ttl
}

// TestLeaseOutlivesRetention: a claim whose lease is longer than the
// retention must not vanish while its owner still holds it, and Renew keeps
// the key alive for as long as it extends the lease.
func TestLeaseOutlivesRetention(t *testing.T) {
	rdb := testkit.Redis(t)
	s, prefix := newStore(t, rdb)
	sc := scope("long-lease")
	claim(t, s, sc, "owner-1", time.Minute, time.Second)
	key := onlyKey(t, rdb, prefix)
	if ttl := pttl(t, rdb, key); ttl < 50*time.Second {
		t.Fatalf("in-flight key TTL %v, want about the one-minute lease", ttl)
	}
	if err := s.Renew(t.Context(), sc, "owner-1", 10*time.Minute); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	if ttl := pttl(t, rdb, key); ttl < 9*time.Minute {
		t.Fatalf("key TTL after renewing for 10m: %v", ttl)
	}
	// A shorter renewal never shortens the key's life below the lease.
	if err := s.Renew(t.Context(), sc, "owner-1", time.Minute); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	if ttl := pttl(t, rdb, key); ttl < 9*time.Minute {
		t.Fatalf("key TTL shrank to %v after a shorter renewal", ttl)
	}
	// Completion switches to the retention.
	if err := s.Complete(t.Context(), sc, "owner-1", idempotency.Response{Status: 204}, 2*time.Second); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if ttl := pttl(t, rdb, key); ttl > 2*time.Second {
		t.Fatalf("completed key TTL %v, want at most the 2s retention", ttl)
	}
}

// A claim sent again under its own owner token (go-redis resends a script
// whose reply timed out) is the caller's claim, with its token; anyone
// else's claim still finds the key in use.
func TestClaimSentAgainIsOurs(t *testing.T) {
	rdb := testkit.Redis(t)
	s, _ := newStore(t, rdb)
	sc := scope("sent-again")
	req := idempotency.ClaimRequest{Scope: sc, Fingerprint: "fp", Owner: "owner-1", Lease: time.Minute, Retention: time.Hour}
	first, err := s.Claim(t.Context(), req)
	if err != nil || !first.Claimed {
		t.Fatalf("first claim: %+v, %v", first, err)
	}
	again, err := s.Claim(t.Context(), req)
	if err != nil || !again.Claimed || again.Record.FencingToken != first.Record.FencingToken {
		t.Fatalf("the same claim again: %+v, %v; want it claimed with token %d", again, err, first.Record.FencingToken)
	}
	req.Owner = "owner-2"
	other, err := s.Claim(t.Context(), req)
	if err != nil || other.Claimed || other.Record.State != idempotency.StateInFlight {
		t.Fatalf("another owner's claim: %+v, %v; want the record in flight, not claimed", other, err)
	}
	if err := s.Complete(t.Context(), sc, "owner-1", idempotency.Response{Status: 201}, time.Hour); err != nil {
		t.Fatalf("Complete by the owner: %v", err)
	}
}

// TestScriptFlush: a script cache emptied under the store (SCRIPT FLUSH, a
// restart, a failover to a fresh node) only costs one reload per script.
func TestScriptFlush(t *testing.T) {
	rdb := testkit.Redis(t)
	s, _ := newStore(t, rdb)
	ctx := t.Context()
	cycle := func(name string) {
		t.Helper()
		sc := scope(name)
		first := claimToken(t, s, sc, "owner-1").Record.FencingToken
		if err := s.Renew(ctx, sc, "owner-1", time.Minute); err != nil {
			t.Fatalf("Renew: %v", err)
		}
		if err := s.MarkUnknown(ctx, sc, "owner-1"); err != nil {
			t.Fatalf("MarkUnknown: %v", err)
		}
		if err := s.Resolve(ctx, sc); err != nil {
			t.Fatalf("Resolve: %v", err)
		}
		second := claimToken(t, s, sc, "owner-2").Record.FencingToken
		if err := s.Release(ctx, sc, "owner-2"); err != nil {
			t.Fatalf("Release: %v", err)
		}
		third := claimToken(t, s, sc, "owner-3").Record.FencingToken
		if first >= second || second >= third {
			t.Fatalf("fencing tokens %d, %d, %d: not rising", first, second, third)
		}
		if err := s.Complete(ctx, sc, "owner-3", idempotency.Response{Status: 201, Body: []byte("done")}, time.Hour); err != nil {
			t.Fatalf("Complete: %v", err)
		}
		rec, err := s.Get(ctx, sc)
		if err != nil {
			t.Fatalf("Get: %v", err)
		}
		if rec.State != idempotency.StateCompleted || rec.FencingToken != third || string(rec.Response.Body) != "done" {
			t.Fatalf("record after the cycle: %+v", rec)
		}
	}
	cycle("before")
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatalf("SCRIPT FLUSH: %v", err)
	}
	cycle("after")
}

// TestWatchUnsubscribes: stopping the last watch of a record, or ending its
// context, unsubscribes its channel, so watches do not pile up on the
// server; watches of one record share the subscription.
func TestWatchUnsubscribes(t *testing.T) {
	rdb := testkit.Redis(t)
	s, prefix := newStore(t, rdb)
	sc := scope("watched")
	claim(t, s, sc, "owner-1", time.Minute, time.Hour)
	channel := onlyKey(t, rdb, prefix) + ":changed"

	subscribers := func() int64 {
		t.Helper()
		n, err := rdb.PubSubNumSub(t.Context(), channel).Result()
		if err != nil {
			t.Fatalf("PUBSUB NUMSUB: %v", err)
		}
		return n[channel]
	}
	waitSubscribers := func(want int64) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for subscribers() != want {
			if time.Now().After(deadline) {
				t.Fatalf("%s has %d subscribers, want %d", channel, subscribers(), want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	first, stopFirst, err := s.Watch(t.Context(), sc)
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	second, stopSecond, err := s.Watch(ctx, sc)
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	defer stopSecond()
	// Subscribed before Watch returned, once for both watches.
	if n := subscribers(); n != 1 {
		t.Fatalf("%d subscriptions for two watches of one record, want 1", n)
	}
	if err := s.Release(t.Context(), sc, "owner-1"); err != nil {
		t.Fatal(err)
	}
	for i, c := range []<-chan struct{}{first, second} {
		select {
		case <-c:
		case <-time.After(5 * time.Second):
			t.Fatalf("watch %d not notified of the release", i+1)
		}
	}

	stopFirst()
	stopFirst() // stop is idempotent
	if n := subscribers(); n != 1 {
		t.Fatalf("after one of two watches stopped: %d subscribers, want 1", n)
	}
	cancel()
	waitSubscribers(0)
}

// TestWatchSubscribedOnReturn: Watch must not return before the server has
// the subscription, or a change right after it goes unheard. The store's
// connections here deliver what they write 100 ms late, so a Watch that
// returned once SUBSCRIBE was merely written would miss the publish the test
// sends at once on a prompt connection.
func TestWatchSubscribedOnReturn(t *testing.T) {
	prompt := testkit.Redis(t)
	opt, err := redis.ParseURL(testkit.RedisURL(t))
	if err != nil {
		t.Fatal(err)
	}
	opt.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return newLagConn(c, 100*time.Millisecond), nil
	}
	lagging := redis.NewClient(opt)
	t.Cleanup(func() { _ = lagging.Close() })

	prefix := testkit.Prefix()
	s := redisstore.New(lagging, redisstore.WithPrefix(prefix))
	t.Cleanup(func() {
		_ = s.Close()
		deleteKeys(t, prompt, prefix)
	})
	sc := scope("lagging")
	claim(t, redisstore.New(prompt, redisstore.WithPrefix(prefix)), sc, "owner", time.Minute, time.Hour)
	channel := onlyKey(t, prompt, prefix) + ":changed"

	for range 3 {
		changed, stop, err := s.Watch(t.Context(), sc)
		if err != nil {
			t.Fatalf("Watch: %v", err)
		}
		if err := prompt.Publish(t.Context(), channel, "test").Err(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-changed:
		case <-time.After(5 * time.Second):
			t.Fatal("a publish sent right after Watch returned was not received")
		}
		stop()
	}
}

// lagConn hands every write to the network lag after it was made, in order;
// Write itself returns at once.
type lagConn struct {
	net.Conn
	lag time.Duration

	mu     sync.Mutex
	closed bool
	queue  chan lagged
	done   chan struct{}
}

type lagged struct {
	at   time.Time
	data []byte
}

func newLagConn(c net.Conn, lag time.Duration) *lagConn {
	l := &lagConn{Conn: c, lag: lag, queue: make(chan lagged, 1024), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		for w := range l.queue {
			time.Sleep(time.Until(w.at))
			if _, err := l.Conn.Write(w.data); err != nil {
				return
			}
		}
	}()
	return l
}

func (l *lagConn) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return 0, net.ErrClosed
	}
	l.queue <- lagged{at: time.Now().Add(l.lag), data: bytes.Clone(b)}
	return len(b), nil
}

func (l *lagConn) Close() error {
	l.mu.Lock()
	if !l.closed {
		l.closed = true
		close(l.queue)
	}
	l.mu.Unlock()
	err := l.Conn.Close()
	<-l.done
	return err
}

// TestWatchChurn: watches of a few records start and stop concurrently, so
// their channels are subscribed and unsubscribed over and over on the shared
// connection. Every watch must be subscribed when Watch returns (it hears a
// publish sent right after), and nothing stays subscribed at the end.
func TestWatchChurn(t *testing.T) {
	rdb := testkit.Redis(t)
	s, prefix := newStore(t, rdb)
	const (
		records    = 4
		goroutines = 16
		rounds     = 25
	)
	scopes := make([]idempotency.Scope, records)
	for i := range scopes {
		scopes[i] = scope("churn-" + strconv.Itoa(i))
		claim(t, s, scopes[i], "owner", time.Minute, time.Hour)
	}
	// The channel of each record: its key + ":changed".
	channels := make(map[string]string)
	for _, k := range scanKeys(t, rdb, prefix) {
		name, err := rdb.HGet(t.Context(), k, "key").Result()
		if err != nil {
			t.Fatal(err)
		}
		channels[name] = k + ":changed"
	}
	if len(channels) != records {
		t.Fatalf("found %d record keys, want %d", len(channels), records)
	}

	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Go(func() {
			sc := scopes[g%records]
			for r := range rounds {
				changed, stop, err := s.Watch(t.Context(), sc)
				if err != nil {
					errs <- err
					return
				}
				if err := rdb.Publish(t.Context(), channels[sc.Key], "test").Err(); err != nil {
					stop()
					errs <- err
					return
				}
				select {
				case <-changed:
				case <-time.After(5 * time.Second):
					stop()
					errs <- errors.New("goroutine " + strconv.Itoa(g) + " round " + strconv.Itoa(r) + ": publish after Watch not received")
					return
				}
				stop()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for _, ch := range channels {
		deadline := time.Now().Add(5 * time.Second)
		for {
			n, err := rdb.PubSubNumSub(t.Context(), ch).Result()
			if err != nil {
				t.Fatal(err)
			}
			if n[ch] == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s still has %d subscribers after every watch stopped", ch, n[ch])
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// TestWatchCancelled: a Watch whose context has already ended fails and
// leaves no subscription behind.
func TestWatchCancelled(t *testing.T) {
	rdb := testkit.Redis(t)
	s, prefix := newStore(t, rdb)
	sc := scope("cancelled")
	claim(t, s, sc, "owner", time.Minute, time.Hour)
	channel := onlyKey(t, rdb, prefix) + ":changed"
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, _, err := s.Watch(ctx, sc); !errors.Is(err, context.Canceled) {
		t.Fatalf("Watch with a cancelled context: got %v, want context.Canceled", err)
	}
	// A later watch works and is the only subscriber.
	_, stop, err := s.Watch(t.Context(), sc)
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	defer stop()
	n, err := rdb.PubSubNumSub(t.Context(), channel).Result()
	if err != nil {
		t.Fatal(err)
	}
	if n[channel] != 1 {
		t.Fatalf("%s has %d subscribers, want 1", channel, n[channel])
	}
}

// TestClose: Close ends the shared subscription and its goroutines (goleak
// checks the latter when the package's tests end); Watch then fails.
func TestClose(t *testing.T) {
	rdb := testkit.Redis(t)
	s := redisstore.New(rdb, redisstore.WithPrefix(testkit.Prefix()))
	sc := scope("closing")
	_, stop, err := s.Watch(t.Context(), sc)
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	stop() // after Close: no panic, no error
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, _, err := s.Watch(t.Context(), sc); !errors.Is(err, redisstore.ErrClosed) {
		t.Fatalf("Watch after Close: got %v, want ErrClosed", err)
	}
	// The records still work: Close only concerns notifications.
	if _, err := s.Get(t.Context(), sc); !errors.Is(err, idempotency.ErrNotFound) {
		t.Fatalf("Get after Close: got %v, want ErrNotFound", err)
	}
}

// TestDefaultPrefix: without WithPrefix keys start with "idemgate:idem:{"
// and the hash names its scope.
func TestDefaultPrefix(t *testing.T) {
	rdb := testkit.Redis(t)
	s := redisstore.New(rdb)
	t.Cleanup(func() { _ = s.Close() })
	sc := idempotency.Scope{Tenant: "t-" + testkit.Prefix(), Route: "r", Key: "k"}
	claim(t, s, sc, "owner-1", time.Minute, time.Minute)
	t.Cleanup(func() { _ = s.Delete(context.Background(), sc) })
	for _, k := range scanKeys(t, rdb, redisstore.DefaultPrefix+"idem:{") {
		if tenant, _ := rdb.HGet(t.Context(), k, "tenant").Result(); tenant == sc.Tenant {
			return
		}
	}
	t.Fatalf("no key under %q holds the record", redisstore.DefaultPrefix)
}

// TestPublishesOnlyWatchedRecords: ending a record nobody waits for
// publishes nothing; ending one a duplicate watches (from another Store,
// as on another gateway instance) publishes once.
func TestPublishesOnlyWatchedRecords(t *testing.T) {
	t.Parallel()
	rdb := testkit.Redis(t)
	ctx := t.Context()
	prefix := testkit.Prefix()
	s := redisstore.New(rdb, redisstore.WithPrefix(prefix))
	other := redisstore.New(rdb, redisstore.WithPrefix(prefix))
	t.Cleanup(func() {
		_ = s.Close()
		_ = other.Close()
		deleteKeys(t, rdb, prefix)
	})
	ps := rdb.PSubscribe(ctx, prefix+"*")
	t.Cleanup(func() { _ = ps.Close() })
	if _, err := ps.Receive(ctx); err != nil { // the subscription's confirmation
		t.Fatal(err)
	}
	msgs := ps.Channel()
	claim := func(sc idempotency.Scope, owner string) {
		t.Helper()
		res, err := s.Claim(ctx, idempotency.ClaimRequest{Scope: sc, Fingerprint: "fp", Owner: owner, Lease: time.Minute, Retention: time.Hour})
		if err != nil || !res.Claimed {
			t.Fatalf("claim %v: %+v %v", sc, res, err)
		}
	}
	idempotencytest.EndEach(t, s, other, claim,
		func(name string, _ idempotency.Scope, changed <-chan struct{}, stop func()) {
			select {
			case <-changed:
			case <-time.After(waitFor):
				t.Fatalf("%s: the watcher heard nothing", name)
			}
			stop()
			// Publishes arrive in the order they were sent: the quiet record's
			// would come first.
			var got []string
			timeout := time.After(waitFor)
			for len(got) < 1 {
				select {
				case m := <-msgs:
					if strings.HasSuffix(m.Channel, ":changed") {
						got = append(got, m.Payload)
					}
				case <-timeout:
					t.Fatalf("%s: nothing published", name)
				}
			}
			select {
			case m := <-msgs:
				t.Fatalf("%s: a second publish %q on %s: the unwatched record published too", name, m.Payload, m.Channel)
			case <-time.After(200 * time.Millisecond):
			}
		})
}

// waitFor bounds a wait for something asynchronous; generous on purpose.
const waitFor = 15 * time.Second

// The conformance suite again, every script its own round trip.
func TestConformanceUnpipelined(t *testing.T) {
	rdb := testkit.Redis(t)
	idempotencytest.Run(t, func(t *testing.T) idempotency.Store {
		prefix := testkit.Prefix()
		s := redisstore.New(rdb, redisstore.WithPrefix(prefix), redisstore.WithPipelining(0, 0))
		t.Cleanup(func() {
			_ = s.Close()
			deleteKeys(t, rdb, prefix)
		})
		return s
	})
}
