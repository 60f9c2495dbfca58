package pgstore

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/internal/testkit/topology"
	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/middleware/idempotency/idempotencytest"
)

// Through PgBouncer in transaction pooling mode: the pool's statements in
// pgx's exec mode (no named prepared statements), each transaction on
// whichever server connection the pooler lends. They run when TEST_TOPOLOGY
// is set and pgbouncer is installed (`make test` does both).

// throughPgBouncer returns a pool on a database of the test's own that goes
// through a private PgBouncer, and the direct URL of that database.
func throughPgBouncer(t *testing.T) (*pgxpool.Pool, string) {
	t.Helper()
	direct := testkit.Database(t)
	bouncer := topology.StartPgBouncer(t)
	u, err := url.Parse(bouncer.URL(direct))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("default_query_exec_mode", "exec")
	u.RawQuery = q.Encode()
	return testkit.PoolAt(t, u.String()), direct
}

func directConfig(t *testing.T, direct string) *pgx.ConnConfig {
	t.Helper()
	cc, err := pgx.ParseConfig(direct)
	if err != nil {
		t.Fatal(err)
	}
	return cc
}

// The store works through the pooler, batches included, with its
// listener on a direct connection.
func TestConformanceThroughPgBouncer(t *testing.T) {
	t.Parallel()
	pool, direct := throughPgBouncer(t)
	listen := directConfig(t, direct)
	idempotencytest.Run(t, func(t *testing.T) idempotency.Store {
		s := New(pool, WithListenConfig(listen), WithLogger(slog.New(slog.NewTextHandler(t.Output(), nil))))
		t.Cleanup(s.Close)
		return s
	})
}

// With a direct listener, the end of a watched record is notified; the
// conformance suite's Watch would also pass on the wake-up every listener
// sends when it connects, so this one waits for that first.
func TestWatchThroughPgBouncerWithDirectListener(t *testing.T) {
	t.Parallel()
	pool, direct := throughPgBouncer(t)
	s := New(pool, WithListenConfig(directConfig(t, direct)), WithLogger(slog.New(slog.NewTextHandler(t.Output(), nil))))
	t.Cleanup(s.Close)
	scope := idempotency.Scope{Tenant: "t", Route: "r", Key: "k"}
	claim(t, s, scope, "fp", "owner")
	changed, stop, err := s.Watch(t.Context(), scope)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	receive(t, changed, "wake-up when the listener connected")
	if err := s.Complete(t.Context(), scope, "owner", idempotency.Response{Status: 201}, time.Hour); err != nil {
		t.Fatal(err)
	}
	receive(t, changed, "notification of the completion")
	if s.deaf.Load() {
		t.Fatal("the direct listener was found deaf")
	}
}

// Without a direct connection the listener's LISTEN lands on a pooled
// server connection and hears nothing. The store finds that out and says
// so, and a duplicate waiting for the request in flight still gets the
// replay, by polling.
func TestWaitInFlightPollsThroughPgBouncer(t *testing.T) {
	t.Parallel()
	pool, _ := throughPgBouncer(t)
	var logs testkit.SyncBuffer
	s := New(pool, WithLogger(slog.New(slog.NewTextHandler(io.MultiWriter(&logs, t.Output()), nil))))
	t.Cleanup(s.Close)

	release := make(chan struct{})
	started := make(chan struct{}, 1)
	var calls int
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		started <- struct{}{}
		<-release
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"id":"pay_1"}`)
	})
	mw, err := idempotency.New(s, idempotency.Config{
		Route:        "payments",
		Tenant:       func(*http.Request) string { return "acme" },
		WaitInFlight: 30 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := mw.Wrap(handler)
	post := func() *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "/v1/payments", strings.NewReader(`{"amount":100}`))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Idempotency-Key", "k-1")
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, r)
		return w
	}

	first := make(chan *httptest.ResponseRecorder, 1)
	go func() { first <- post() }()
	<-started
	dup := make(chan *httptest.ResponseRecorder, 1)
	go func() { dup <- post() }()

	// The duplicate watches the record; its store finds its listener deaf.
	deadline := time.Now().Add(waitFor)
	for !s.deaf.Load() {
		if time.Now().After(deadline) {
			close(release)
			t.Fatalf("the listener was not found deaf within %s", waitFor)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(logs.String(), "database_direct_url") {
		t.Errorf("the store did not say how to give its listener a direct connection; log:\n%s", logs.String())
	}

	ended := time.Now()
	close(release)
	orig := <-first
	var got *httptest.ResponseRecorder
	select {
	case got = <-dup:
	case <-time.After(waitFor):
		t.Fatalf("the waiting duplicate had no answer within %s of the original's end", waitFor)
	}
	if got.Code != http.StatusCreated || got.Header().Get(idempotency.HeaderReplayed) != "true" || got.Body.String() != orig.Body.String() {
		t.Fatalf("waiting duplicate: %d %q (replayed %q), want the original's replay %q",
			got.Code, got.Body, got.Header().Get(idempotency.HeaderReplayed), orig.Body)
	}
	// Polling backs off to one claim every 500ms.
	if d := time.Since(ended); d > 3*time.Second {
		t.Errorf("the duplicate's replay came %s after the original ended; polling should find it within a second", d)
	}
	if calls != 1 {
		t.Fatalf("the handler ran %d times", calls)
	}
}
