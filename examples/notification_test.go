package examples

import (
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/examples/partnersim"
	"github.com/idemgate/idemgate/workers"
)

// dedupLog counts OnDedup's hits and misses.
type dedupLog struct {
	mu           sync.Mutex
	hits, misses int
}

func (d *dedupLog) fn(hit bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if hit {
		d.hits++
	} else {
		d.misses++
	}
}

func (d *dedupLog) counts() (hits, misses int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.hits, d.misses
}

// crashedAfterEffect puts a succeeded job back to processing, as if its
// worker had died after the effect and before recording the success: the
// next delivery runs the business function again.
func crashedAfterEffect(t *testing.T, e *bizEnv, tenant, key string) {
	t.Helper()
	if _, err := e.pool.Exec(t.Context(), `
UPDATE job_executions SET status = 'processing', result_ref = NULL, finished_at = NULL
 WHERE tenant = $1 AND key = $2`, tenant, key); err != nil {
		t.Fatal(err)
	}
}

func messages(t *testing.T, e *bizEnv, tenant, key string) []string {
	t.Helper()
	return strings1(t, e.pool, `SELECT partner_message_id FROM notifications WHERE tenant = $1 AND dedup_key = $2`, tenant, key)
}

// dedupKey is the Redis key of tenant's message in e's dedup window.
func (e *bizEnv) dedupKey(tenant, key string) string {
	return e.prefix + "dedup:{" + workers.Scope(tenant, key) + "}"
}

func TestNotificationDedup(t *testing.T) {
	t.Parallel()
	p := NotificationSend{EventID: "ev-9", UserID: "u-9", Template: "receipt"}
	key, _ := identity(t, TaskNotificationSend, p)
	tests := []struct {
		name string
		// prepare runs before the first delivery: it plants what an
		// earlier, interrupted attempt would have left.
		prepare func(t *testing.T, e *bizEnv)
		// brokenRedis gives the handlers a dedup Redis nobody listens on.
		brokenRedis bool
		wantHits    int
		wantMisses  int
	}{
		{
			name:       "first attempt",
			wantMisses: 1,
		},
		{
			name: "a key in the window without a record still sends",
			prepare: func(t *testing.T, e *bizEnv) {
				// A worker set the key and died before sending.
				if err := e.rdb.Set(t.Context(), e.dedupKey("acme", key), "1", time.Hour).Err(); err != nil {
					t.Fatal(err)
				}
			},
			wantHits: 1,
		},
		{
			name: "another tenant's key in the window is not this message's",
			prepare: func(t *testing.T, e *bizEnv) {
				if err := e.rdb.Set(t.Context(), e.dedupKey("globex", key), "1", time.Hour).Err(); err != nil {
					t.Fatal(err)
				}
			},
			wantMisses: 1,
		},
		{
			name:        "Redis down: the record decides",
			brokenRedis: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var dedup dedupLog
			e := newBizEnv(t, partnersim.Options{}, func(b *Business, d *workers.Deps) {
				b.DedupWindow = time.Hour
				b.OnDedup = dedup.fn
				if tt.brokenRedis {
					broken := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
					t.Cleanup(func() { _ = broken.Close() })
					b.Redis = broken
				}
			})
			if tt.prepare != nil {
				tt.prepare(t, e)
			}
			tk := task(t, "acme", TaskNotificationSend, p)
			if err := e.deliver(t, tk); err != nil {
				t.Fatal(err)
			}
			sent := messages(t, e, "acme", key)
			applied := e.sim.Applied()
			if len(sent) != 1 || len(applied) != 1 || applied[sent[0]] != 1 {
				t.Fatalf("recorded %q, partner applied %v; want one message, sent once", sent, applied)
			}
			if hits, misses := dedup.counts(); hits != tt.wantHits || misses != tt.wantMisses {
				t.Fatalf("dedup hits %d, misses %d; want %d, %d", hits, misses, tt.wantHits, tt.wantMisses)
			}
			if !tt.brokenRedis {
				ttl, err := e.rdb.TTL(t.Context(), e.dedupKey("acme", key)).Result()
				if err != nil || ttl <= 0 || ttl > time.Hour {
					t.Fatalf("dedup key TTL = %v, %v; want within the 1h window", ttl, err)
				}
			}

			// The worker dies after sending and recording, before the job's
			// success: the rerun finds the key and the record, and does not
			// call the partner.
			crashedAfterEffect(t, e, "acme", key)
			before := e.sim.Stats().Requests
			if err := e.deliver(t, tk); err != nil {
				t.Fatalf("rerun: %v", err)
			}
			if got := e.sim.Stats().Requests; got != before {
				t.Fatalf("the rerun called the partner (%d requests, was %d) although the record says sent", got, before)
			}
			if rec := e.exec(t, "acme", key); rec.ResultRef != sent[0] {
				t.Fatalf("rerun's result = %q, want %s", rec.ResultRef, sent[0])
			}
		})
	}
}

// Redis lost the key (a restart, the window ran out) and the worker died
// after recording: the rerun goes to the partner, whose deduplication by
// Idempotency-Key answers with the first message, and the record keeps it.
func TestNotificationForgottenKey(t *testing.T) {
	t.Parallel()
	e := newBizEnv(t, partnersim.Options{}, nil)
	p := NotificationSend{EventID: "ev-3", UserID: "u-3", Template: "reset"}
	key, _ := identity(t, TaskNotificationSend, p)
	tk := task(t, "acme", TaskNotificationSend, p)
	if err := e.deliver(t, tk); err != nil {
		t.Fatal(err)
	}
	first := messages(t, e, "acme", key)
	crashedAfterEffect(t, e, "acme", key)
	if err := e.rdb.Del(t.Context(), e.dedupKey("acme", key)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := e.deliver(t, tk); err != nil {
		t.Fatalf("rerun: %v", err)
	}
	if got := messages(t, e, "acme", key); len(got) != 1 || got[0] != first[0] {
		t.Fatalf("records after the rerun = %q, want the first %q", got, first)
	}
	if st := e.sim.Stats(); st.Applied != 1 || st.Replayed != 1 {
		t.Fatalf("partner stats %+v, want one message applied and the rerun replayed", st)
	}
}
