package workers

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/enqueue"
	"github.com/idemgate/idemgate/internal/partnersim"
	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/idemgate/idemgate/workers/execution"
	"github.com/idemgate/idemgate/workers/lock"
)

// bizEnv is one test's business handlers on a schema of its own, Redis
// under a prefix of its own and a partner of its own.
type bizEnv struct {
	pool     *pgxpool.Pool
	rdb      *redis.Client
	prefix   string
	sim      *partnersim.Sim
	partner  *httptest.Server
	biz      Business
	deps     Deps
	handlers map[string]asynq.Handler
	results  *resultLog
}

// newBizEnv starts a partnersim with simOpts; adjust, if set, changes the
// configuration before the handlers are built.
func newBizEnv(t *testing.T, simOpts partnersim.Options, adjust func(*Business, *Deps)) *bizEnv {
	t.Helper()
	e := &bizEnv{pool: testenv.Pool(t), rdb: testenv.Redis(t), prefix: testenv.Prefix(), results: &resultLog{}}
	e.sim = partnersim.New(simOpts)
	e.partner = httptest.NewServer(e.sim)
	t.Cleanup(e.partner.Close)
	e.deps = Deps{
		DB:       e.pool,
		Redis:    e.rdb,
		Lock:     lock.Options{Prefix: e.prefix, TTL: 20 * time.Second},
		Logger:   testLogger(),
		OnStatus: e.results.record,
	}
	e.biz = Business{
		DB:          e.pool,
		Redis:       e.rdb,
		PartnerURL:  e.partner.URL,
		DedupPrefix: e.prefix,
	}
	if adjust != nil {
		adjust(&e.biz, &e.deps)
	}
	hs, err := businessHandlers(e.deps, e.biz)
	if err != nil {
		t.Fatal(err)
	}
	e.handlers = hs
	return e
}

func (e *bizEnv) handler(kind string) asynq.Handler { return e.handlers[kind] }

// resultLog keeps the result_ref each succeeded delivery reported, by key.
type resultLog struct {
	mu   sync.Mutex
	refs map[string][]string
}

func (l *resultLog) record(_ context.Context, _ *asynq.Task, key, status string, _ int, resultRef, _ string) {
	if status != StatusSucceeded {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.refs == nil {
		l.refs = map[string][]string{}
	}
	l.refs[key] = append(l.refs[key], resultRef)
}

func (l *resultLog) of(key string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.refs[key])
}

func task(t *testing.T, kind string, payload any) *asynq.Task {
	t.Helper()
	b, err := json.Marshal(payload)
	if err != nil {
		t.Fatal(err)
	}
	return asynq.NewTask(kind, b)
}

// untilAcked delivers task until it is acked, as asynq would after each
// retryable error, and returns the errors met on the way. A permanent
// error fails the test.
func untilAcked(t *testing.T, h asynq.Handler, task *asynq.Task) []error {
	t.Helper()
	var errs []error
	deadline := time.Now().Add(90 * time.Second)
	for {
		err := h.ProcessTask(t.Context(), task)
		if err == nil {
			return errs
		}
		if IsPermanent(err) || errors.Is(err, asynq.SkipRetry) {
			t.Fatalf("delivery failed for good: %v", err)
		}
		errs = append(errs, err)
		if time.Now().After(deadline) {
			t.Fatalf("task still not acked after %d deliveries: %v", len(errs), err)
		}
		time.Sleep(time.Duration(10+rand.IntN(20)) * time.Millisecond)
	}
}

// seededRand is a deterministic partnersim.Options.Rand, safe for the
// partner's concurrent handlers.
func seededRand(seed uint64) func() float64 {
	var mu sync.Mutex
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	return func() float64 {
		mu.Lock()
		defer mu.Unlock()
		return r.Float64()
	}
}

// strings1 queries one text column.
func strings1(t *testing.T, pool *pgxpool.Pool, query string, args ...any) []string {
	t.Helper()
	rows, err := pool.Query(t.Context(), query, args...)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestEachHandlerHasOneEffect delivers each kind's task ten times at once
// and then again after its success: one effect row, at most one effect at
// the partner, and the same result_ref for every delivery.
func TestEachHandlerHasOneEffect(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		kind    string
		payload enqueue.Payload
		// effects lists the effect rows' ids for the payload.
		effects string
		// partner is how many effects the partner must have applied.
		partner int
	}{
		{
			name:    "invoice",
			kind:    enqueue.TaskInvoiceCreate,
			payload: enqueue.InvoiceCreate{OrderID: "o-1", AmountCents: 1250, Currency: "EUR"},
			effects: `SELECT id FROM invoices WHERE order_id = 'o-1'`,
		},
		{
			name:    "inventory",
			kind:    enqueue.TaskInventoryAdjust,
			payload: enqueue.InventoryAdjust{AdjustmentID: "adj-1", SKU: "sku-1", Delta: 5},
			effects: `SELECT adjustment_id FROM inventory_ledger WHERE sku = 'sku-1'`,
		},
		{
			name:    "payment",
			kind:    enqueue.TaskPaymentCharge,
			payload: enqueue.PaymentCharge{PaymentID: "pay-1", AmountCents: 990, Currency: "IDR"},
			effects: `SELECT partner_charge_id FROM payments WHERE payment_id = 'pay-1' AND status = 'succeeded'`,
			partner: 1,
		},
		{
			name:    "notification",
			kind:    enqueue.TaskNotificationSend,
			payload: enqueue.NotificationSend{EventID: "ev-1", UserID: "u-1", Template: "welcome"},
			effects: `SELECT partner_message_id FROM notifications WHERE user_id = 'u-1'`,
			partner: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newBizEnv(t, partnersim.Options{}, nil)
			h := e.handler(tt.kind)
			tk := task(t, tt.kind, tt.payload)

			const deliveries = 10
			var wg sync.WaitGroup
			start := make(chan struct{})
			for range deliveries {
				wg.Go(func() {
					<-start
					deliverUntilDone(t, h, tk)
				})
			}
			close(start)
			wg.Wait()
			for i := range 3 {
				if err := h.ProcessTask(t.Context(), tk); err != nil {
					t.Fatalf("delivery %d after the success: %v", deliveries+i+1, err)
				}
			}

			effects := strings1(t, e.pool, tt.effects)
			if len(effects) != 1 {
				t.Fatalf("effect rows = %q, want one", effects)
			}
			key := tt.payload.BusinessKey()
			rec := execOf(t, e.pool, key)
			if rec.Attempts != 1 || rec.ResultRef != effects[0] {
				t.Fatalf("execution = %+v, want one attempt with result %s", rec, effects[0])
			}
			refs := e.results.of(key)
			if len(refs) != deliveries+3 {
				t.Fatalf("%d deliveries reported success, want %d", len(refs), deliveries+3)
			}
			for _, ref := range refs {
				if ref != effects[0] {
					t.Fatalf("result_ref across deliveries = %q, want %s every time", refs, effects[0])
				}
			}
			applied := e.sim.Applied()
			if len(applied) != tt.partner {
				t.Fatalf("partner applied %v, want %d effects", applied, tt.partner)
			}
			for id, n := range applied {
				if n != 1 || id != effects[0] {
					t.Fatalf("partner applied %s %d times; want %s once", id, n, effects[0])
				}
			}
		})
	}
}

// execOf returns the execution record of key.
func execOf(t *testing.T, pool *pgxpool.Pool, key string) execution.Record {
	t.Helper()
	rec, err := execution.New(pool).Get(t.Context(), key)
	if err != nil {
		t.Fatalf("execution of %s: %v", key, err)
	}
	return rec
}

func TestRegister(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(t.Context(), "postgres://nobody@127.0.0.1:1/none") // never dialled
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = rdb.Close() })
	deps := Deps{DB: pool, Redis: rdb}

	mux := asynq.NewServeMux()
	if err := Register(mux, deps, Business{DB: pool, Redis: rdb, PartnerURL: "http://127.0.0.1:9100"}); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{enqueue.TaskInvoiceCreate, enqueue.TaskInventoryAdjust, enqueue.TaskPaymentCharge, enqueue.TaskNotificationSend} {
		if _, pattern := mux.Handler(asynq.NewTask(kind, nil)); pattern != kind {
			t.Errorf("task %s is handled by pattern %q, want its own", kind, pattern)
		}
	}

	empty := asynq.NewServeMux()
	err = Register(empty, deps, Business{PartnerURL: "ftp://partner", PartnerTimeout: -1, DedupWindow: 1500 * time.Millisecond})
	if err == nil {
		t.Fatal("Register accepted an invalid configuration")
	}
	if _, pattern := empty.Handler(asynq.NewTask(enqueue.TaskInvoiceCreate, nil)); pattern != "" {
		t.Fatal("Register registered handlers despite the invalid configuration")
	}
}

func TestBusinessValidate(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(t.Context(), "postgres://nobody@127.0.0.1:1/none")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = rdb.Close() })
	valid := Business{DB: pool, Redis: rdb, PartnerURL: "http://127.0.0.1:9100"}

	tests := []struct {
		name   string
		change func(*Business)
		// want lists a fragment of each expected problem; nil = valid.
		want []string
	}{
		{name: "defaults", change: func(*Business) {}},
		{name: "https partner with a path", change: func(b *Business) { b.PartnerURL = "https://partner.example/v1/" }},
		{name: "no DB", change: func(b *Business) { b.DB = nil }, want: []string{"nil DB"}},
		{name: "no Redis", change: func(b *Business) { b.Redis = nil }, want: []string{"nil Redis"}},
		{name: "relative partner URL", change: func(b *Business) { b.PartnerURL = "/charges" }, want: []string{"partner URL"}},
		{name: "no partner URL", change: func(b *Business) { b.PartnerURL = "" }, want: []string{"partner URL"}},
		{name: "negative timeout", change: func(b *Business) { b.PartnerTimeout = -time.Second }, want: []string{"partner timeout"}},
		{name: "negative breaker", change: func(b *Business) { b.Breaker = BreakerConfig{Failures: -1, CoolDown: -1} }, want: []string{"breaker failures", "breaker cool-down"}},
		{name: "window below a second", change: func(b *Business) { b.DedupWindow = 10 * time.Millisecond }, want: []string{"dedup window"}},
		{name: "window not whole seconds", change: func(b *Business) { b.DedupWindow = 1500 * time.Millisecond }, want: []string{"dedup window"}},
		{
			name: "every problem at once",
			change: func(b *Business) {
				*b = Business{PartnerURL: "x", PartnerTimeout: -1, Breaker: BreakerConfig{Failures: -2}, DedupWindow: -1}
			},
			want: []string{"nil DB", "nil Redis", "partner URL", "partner timeout", "breaker failures", "dedup window"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := valid
			tt.change(&b)
			err := b.Validate()
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate accepted %+v", b)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate: %q lacks %q", err, w)
				}
			}
			if n := len(strings.Split(err.Error(), "\n")); n != len(tt.want) {
				t.Errorf("Validate reported %d problems, want %d: %v", n, len(tt.want), err)
			}
		})
	}
}

func TestBusinessDefaults(t *testing.T) {
	t.Parallel()
	b := Business{}.withDefaults()
	if b.PartnerTimeout != 10*time.Second || b.HTTPClient == nil || b.HTTPClient.Timeout != 10*time.Second ||
		b.Breaker.Failures != 5 || b.Breaker.CoolDown != 30*time.Second || b.DedupWindow != 24*time.Hour || b.Now == nil {
		t.Fatalf("defaults = %+v", b)
	}
	own := &http.Client{}
	set := Business{HTTPClient: own, PartnerTimeout: time.Second, Breaker: BreakerConfig{Failures: 2, CoolDown: time.Minute}, DedupWindow: time.Hour}.withDefaults()
	if set.HTTPClient != own || set.PartnerTimeout != time.Second || set.Breaker.Failures != 2 || set.Breaker.CoolDown != time.Minute || set.DedupWindow != time.Hour {
		t.Fatalf("explicit values overridden: %+v", set)
	}
}
