package job_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/job"
)

func TestParseRamp(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in     string
		want   job.Ramp
		length time.Duration
		bad    bool
	}{
		{in: "10%/1m", want: job.Ramp{Step: 0.1, Every: time.Minute}, length: 9 * time.Minute},
		{in: "25%/30s", want: job.Ramp{Step: 0.25, Every: 30 * time.Second}, length: 90 * time.Second},
		{in: "30%/1m", want: job.Ramp{Step: 0.3, Every: time.Minute}, length: 3 * time.Minute},
		{in: "100%/1m", want: job.Ramp{Step: 1, Every: time.Minute}},
		{in: "10/1m", bad: true},
		{in: "0%/1m", bad: true},
		{in: "101%/1m", bad: true},
		{in: "10%/500ms", bad: true},
		{in: "10%", bad: true},
	} {
		got, err := job.ParseRamp(tc.in)
		switch {
		case tc.bad && err == nil:
			t.Errorf("ParseRamp(%q) = %+v, want an error", tc.in, got)
		case !tc.bad && (err != nil || got != tc.want || got.Length() != tc.length || got.String() != tc.in):
			t.Errorf("ParseRamp(%q) = %+v (length %s, %q), %v; want %+v, length %s", tc.in, got, got.Length(), got, err, tc.want, tc.length)
		}
	}
}

func TestPauseAdmits(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 7, 5, 0, 0, 0, time.UTC)
	ramp := job.Ramp{Step: 0.25, Every: time.Minute}
	for _, tc := range []struct {
		name string
		p    job.Pause
		at   time.Duration
		want float64
	}{
		{"paused until resumed", job.Pause{Since: t0}, time.Hour, 0},
		{"before until", job.Pause{Since: t0, Until: t0.Add(time.Minute)}, 59 * time.Second, 0},
		{"at until", job.Pause{Since: t0, Until: t0.Add(time.Minute)}, time.Minute, 1},
		{"ramp at the resume", job.Pause{Since: t0, Resumed: t0, Ramp: ramp}, 0, 0.25},
		{"ramp after a step", job.Pause{Since: t0, Resumed: t0, Ramp: ramp}, 90 * time.Second, 0.5},
		{"ramp at its end", job.Pause{Since: t0, Resumed: t0, Ramp: ramp}, 3 * time.Minute, 1},
	} {
		if got := tc.p.Admits(t0.Add(tc.at)); got != tc.want {
			t.Errorf("%s: Admits = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestParseUntil(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 7, 5, 0, 0, 0, time.UTC)
	if got, err := job.ParseUntil("30m", now); err != nil || !got.Equal(now.Add(30*time.Minute)) {
		t.Errorf("ParseUntil(30m) = %s, %v", got, err)
	}
	if got, err := job.ParseUntil("2026-12-07T06:30:00+01:00", now); err != nil || !got.Equal(now.Add(30*time.Minute)) {
		t.Errorf("ParseUntil(RFC 3339 in +01:00) = %s, %v", got, err)
	}
	for _, bad := range []string{"-1m", "0s", "2026-12-07T04:59:59Z", "tomorrow"} {
		if _, err := job.ParseUntil(bad, now); err == nil {
			t.Errorf("ParseUntil(%q) accepted", bad)
		}
	}
}

// TestPausesStore pauses, lists, resumes with and without a ramp, and
// lets a breaker's pause stand only where none is in force, on a real
// database; a cache that LISTENs hears each change.
func TestPausesStore(t *testing.T) {
	t.Parallel()
	dbURL := testkit.Postgres(t)
	pool := testkit.PoolAt(t, dbURL)
	store := job.NewPauses(pool)
	ctx := t.Context()
	cc, err := pgx.ParseConfig(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	cache := job.NewPauseCache(store, job.PauseCacheOptions{
		Poll:    time.Hour, // only notifications refresh it in this test
		Connect: func(ctx context.Context) (*pgx.Conn, error) { return pgx.ConnectConfig(ctx, cc) },
		Logger:  testkit.Logger(),
	})
	cctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = cache.Run(cctx) })
	t.Cleanup(func() { stop(); wg.Wait() })
	paused := func(task, queue string, limits ...job.PauseTarget) bool {
		_, ok := cache.Paused(task, queue, limits)
		return ok
	}
	waitUntil := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 30s", what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	task := job.PauseTarget{Kind: job.PauseTask, Name: "payment.charge"}
	p, err := store.Pause(ctx, job.Pause{Target: task, By: "alice", Reason: "partner outage"})
	if err != nil || p.By != "alice" || p.Since.IsZero() || !p.Until.IsZero() {
		t.Fatalf("Pause = %+v, %v", p, err)
	}
	waitUntil("the cache hears the task's pause", func() bool { return paused("payment.charge", "default") })
	if paused("invoice.create", "default") {
		t.Error("another task is paused")
	}
	queue := job.PauseTarget{Kind: job.PauseQueue, Name: "payments"}
	if _, err := store.Pause(ctx, job.Pause{Target: queue, By: "alice"}); err != nil {
		t.Fatal(err)
	}
	waitUntil("the cache hears the queue's pause, on each of its shards", func() bool {
		return paused("invoice.create", job.ShardQueues("payments", 4)[2])
	})

	lim := job.PauseTarget{Kind: job.PauseLimit, Name: "ship-api", Key: "acme"}
	op, opened, err := cache.OpenBreaker(ctx, "ship-api", "acme", 5, 10*time.Second, time.Minute)
	if err != nil || !opened || op.By != job.BreakerActor || op.Reason != "5 consecutive failures within 10s" {
		t.Fatalf("OpenBreaker = %+v, %v, %v", op, opened, err)
	}
	if _, opened, err := cache.OpenBreaker(ctx, "ship-api", "acme", 5, 10*time.Second, time.Hour); opened || err != nil {
		t.Errorf("a second breaker over one in force: opened %v, %v", opened, err)
	}
	waitUntil("the cache sees the open breaker", func() bool { return cache.OpenBreakers()["ship-api"] == 1 })
	if !paused("shipment.book", "default", job.PauseTarget{Kind: job.PauseLimit, Name: "ship-api", Key: "globex"}, lim) {
		t.Error("a delivery under the breaker's key value is not paused")
	}
	if paused("shipment.book", "default", job.PauseTarget{Kind: job.PauseLimit, Name: "ship-api", Key: "globex"}) {
		t.Error("another key value is paused")
	}
	// An operator's pause replaces the breaker's; a breaker does not
	// replace the operator's.
	if _, err := store.Pause(ctx, job.Pause{Target: lim, By: "bob", Reason: "suspended"}); err != nil {
		t.Fatal(err)
	}
	if _, opened, _ := cache.OpenBreaker(ctx, "ship-api", "acme", 5, 10*time.Second, time.Minute); opened {
		t.Error("a breaker replaced an operator's pause")
	}

	list, err := store.InForce(ctx)
	if err != nil || len(list) != 3 {
		t.Fatalf("InForce = %+v, %v; want 3 pauses", list, err)
	}
	r, err := store.Resume(ctx, task, job.Ramp{Step: 0.5, Every: time.Hour})
	if err != nil || r.Resumed.IsZero() || r.Ramp.String() != "50%/1h" {
		t.Fatalf("Resume with a ramp = %+v, %v", r, err)
	}
	if list, _ := store.InForce(ctx); len(list) != 3 {
		t.Errorf("a ramping pause left the list: %+v", list)
	}
	if _, err := store.Resume(ctx, task, job.Ramp{}); err != nil {
		t.Errorf("resume at once while ramping: %v", err)
	}
	if _, err := store.Resume(ctx, task, job.Ramp{}); !errors.Is(err, job.ErrNotPaused) {
		t.Errorf("resume of a task not paused: %v, want ErrNotPaused", err)
	}
	waitUntil("the cache hears the resume", func() bool { return !paused("payment.charge", "default") })
	if n := cache.Reads(); n < 2 {
		t.Errorf("the cache read the table %d times", n)
	}
	var actions int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM admin_actions WHERE actor = 'breaker' AND action = 'pause'`).Scan(&actions); err != nil || actions != 1 {
		t.Errorf("breaker actions = %d, %v; want 1", actions, err)
	}
}

func TestPauseStory(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 7, 5, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		p    job.Pause
		want string
	}{
		{job.Pause{Target: job.PauseTarget{Kind: job.PauseTask, Name: "payment.charge"}, Since: t0, By: "alice", Reason: "partner outage"},
			"paused by task pause since 2026-12-07T05:00:00Z, by alice: partner outage"},
		{job.Pause{Target: job.PauseTarget{Kind: job.PauseLimit, Name: "ship-api", Key: "acme"}, Since: t0, Until: t0.Add(5 * time.Minute), By: job.BreakerActor, Reason: "50 consecutive failures within 1m"},
			`paused by limit pause (limit ship-api key "acme") since 2026-12-07T05:00:00Z until 2026-12-07T05:05:00Z, by breaker: 50 consecutive failures within 1m`},
		{job.Pause{Target: job.PauseTarget{Kind: job.PauseQueue, Name: "default"}, Since: t0, Resumed: t0.Add(time.Hour), By: "bob"},
			"paused by queue pause since 2026-12-07T05:00:00Z, by bob"},
		{job.Pause{Target: job.PauseTarget{Kind: job.PauseQueue, Name: "default"}, Since: t0, Resumed: t0.Add(time.Hour), Ramp: job.Ramp{Step: 0.1, Every: time.Minute}, By: "bob"},
			"paused by queue pause since 2026-12-07T05:00:00Z, resuming at 10%/1m, by bob"},
	} {
		if got := tc.p.Story(); got != tc.want {
			t.Errorf("Story = %q\nwant    %q", got, tc.want)
		}
	}
}
