package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/internal/testkit/faultproxy"
	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/middleware/idempotency/idempotencytest"
	"github.com/idemgate/idemgate/middleware/idempotency/redisstore"
)

// faultNet puts a faultproxy between a client and each Redis node it
// dials, so that a test can freeze the network to all of them at once.
type faultNet struct {
	mu      sync.Mutex
	proxies map[string]*faultproxy.Proxy // by node address
	frozen  bool
}

func newFaultNet(t *testing.T) *faultNet {
	n := &faultNet{proxies: make(map[string]*faultproxy.Proxy)}
	t.Cleanup(func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		for _, p := range n.proxies {
			_ = p.Close()
		}
	})
	return n
}

func (n *faultNet) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	n.mu.Lock()
	p, ok := n.proxies[addr]
	if !ok {
		var err error
		if p, err = faultproxy.New(addr); err != nil {
			n.mu.Unlock()
			return nil, err
		}
		if n.frozen {
			p.Freeze()
		}
		n.proxies[addr] = p
	}
	n.mu.Unlock()
	var d net.Dialer
	return d.DialContext(ctx, network, p.Addr())
}

func (n *faultNet) freeze() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.frozen = true
	for _, p := range n.proxies {
		p.Freeze()
	}
}

func (n *faultNet) thaw() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.frozen = false
	for _, p := range n.proxies {
		p.Thaw()
	}
}

// clientTimeout is the proxied clients' read and write timeout: far longer
// than any deadline the tests set, so a call that ends in time was ended by
// its context, not by the client.
const clientTimeout = time.Minute

// client returns a standalone or cluster client that dials through n.
func (n *faultNet) client(t *testing.T, cluster bool) redis.UniversalClient {
	t.Helper()
	var rdb redis.UniversalClient
	if cluster {
		addrs := os.Getenv("TEST_REDIS_CLUSTER_URL")
		if addrs == "" {
			t.Skip("TEST_REDIS_CLUSTER_URL not set: skipping Redis Cluster integration test (make test sets it)")
		}
		rdb = redis.NewClusterClient(&redis.ClusterOptions{
			Addrs: strings.Split(addrs, ","), Dialer: n.dial,
			ReadTimeout: clientTimeout, WriteTimeout: clientTimeout,
		})
	} else {
		opt, err := redis.ParseURL(testkit.RedisURL(t))
		if err != nil {
			t.Fatal(err)
		}
		opt.Dialer, opt.ReadTimeout, opt.WriteTimeout = n.dial, clientTimeout, clientTimeout
		rdb = redis.NewClient(opt)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// withDeadline calls fn with a context whose deadline is d away and
// returns fn's error. It fails the test when fn has not returned long
// after the deadline.
func withDeadline(t *testing.T, d time.Duration, fn func(ctx context.Context) error) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- fn(ctx) }()
	select {
	case err := <-done:
		return err
	case <-time.After(waitFor):
		t.Fatalf("a call with a %s deadline had not returned %s later", d, waitFor)
		return nil
	}
}

// TestCallsEndAtTheirDeadline: when the network to Redis stops answering,
// a call returns its context's error at the context's deadline, whatever
// the client's own timeouts, and the store works again once the network
// does.
func TestCallsEndAtTheirDeadline(t *testing.T) {
	for _, tc := range []struct {
		name      string
		cluster   bool
		pipelined bool
	}{
		{"standalone/pipelined", false, true},
		{"standalone/unpipelined", false, false},
		{"cluster/pipelined", true, true},
		{"cluster/unpipelined", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			n := newFaultNet(t)
			rdb := n.client(t, tc.cluster)
			prefix := testkit.Prefix()
			opts := []redisstore.Option{redisstore.WithPrefix(prefix)}
			if !tc.pipelined {
				opts = append(opts, redisstore.WithPipelining(0, 0))
			}
			s := redisstore.New(rdb, opts...)
			t.Cleanup(func() {
				n.thaw() // first: Close waits for the replies the frozen calls left
				if err := s.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
				deleteKeys(t, rdb, prefix)
			})
			held := scope("held")
			claim(t, s, held, "owner", time.Minute, time.Hour)

			n.freeze()
			for _, call := range []struct {
				name string
				fn   func(ctx context.Context) error
			}{
				{"Claim", func(ctx context.Context) error {
					_, err := s.Claim(ctx, idempotency.ClaimRequest{Scope: scope("frozen"), Fingerprint: "fp", Owner: "o", Lease: time.Minute, Retention: time.Hour})
					return err
				}},
				{"Renew", func(ctx context.Context) error { return s.Renew(ctx, held, "owner", time.Minute) }},
				{"Complete", func(ctx context.Context) error {
					return s.Complete(ctx, held, "owner", idempotency.Response{Status: 201}, time.Hour)
				}},
				{"Get", func(ctx context.Context) error { _, err := s.Get(ctx, held); return err }},
			} {
				err := withDeadline(t, 300*time.Millisecond, call.fn)
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("%s on a frozen network: %v, want context.DeadlineExceeded", call.name, err)
				}
			}

			n.thaw()
			ctx, cancel := context.WithTimeout(t.Context(), waitFor)
			defer cancel()
			// Concurrent calls, so that old connections and new ones serve them.
			after := func(i int) idempotency.Scope { return scope(fmt.Sprint("after-", i)) }
			if err := idempotencytest.ClaimCompleteEach(ctx, s, 16, after); err != nil {
				t.Fatalf("after the network came back: %v", err)
			}
		})
	}
}
