package examples

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/examples/partnersim"
	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/workers"
)

// example is one example job as the tests drive it.
type example struct {
	name    string
	task    string
	payload any
	// again is another payload with the same business key; conflict says
	// whether it is another request (other data) or the same one written
	// differently.
	again    any
	conflict bool
	// seed, if set, prepares a tenant before its first job.
	seed func(t *testing.T, e *bizEnv, tenant string)
	// effects lists a tenant's effect ids for payload; $1 is the tenant.
	effects string
	// partner says whether the effect is made at the partner.
	partner bool
}

func exampleJobs() []example {
	return []example{
		{
			name:     "invoice",
			task:     TaskInvoiceCreate,
			payload:  InvoiceCreate{OrderID: "o-1", AmountCents: 1250, Currency: "EUR"},
			again:    InvoiceCreate{OrderID: "o-1", AmountCents: 990, Currency: "EUR"},
			conflict: true,
			effects:  `SELECT id FROM invoices WHERE tenant = $1 AND order_id = 'o-1'`,
		},
		{
			name:     "inventory",
			task:     TaskInventoryAdjust,
			payload:  InventoryAdjust{AdjustmentID: "adj-1", SKU: "sku-1", Delta: -3},
			again:    InventoryAdjust{AdjustmentID: "adj-1", SKU: "sku-1", Delta: -4},
			conflict: true,
			seed: func(t *testing.T, e *bizEnv, tenant string) {
				if err := SeedInventory(t.Context(), e.pool, tenant, "sku-1", 10); err != nil {
					t.Fatal(err)
				}
			},
			effects: `SELECT adjustment_id FROM inventory_ledger WHERE tenant = $1 AND sku = 'sku-1'`,
		},
		{
			name:     "payment",
			task:     TaskPaymentCharge,
			payload:  PaymentCharge{PaymentID: "pay-1", AmountCents: 990, Currency: "IDR"},
			again:    PaymentCharge{PaymentID: "pay-1", AmountCents: 990, Currency: "EUR"},
			conflict: true,
			effects:  `SELECT partner_charge_id FROM payments WHERE tenant = $1 AND payment_id = 'pay-1' AND status = 'succeeded'`,
			partner:  true,
		},
		{
			// Every field of a notification is part of its key: the same
			// key is always the same message, however it is written.
			name:    "notification",
			task:    TaskNotificationSend,
			payload: NotificationSend{EventID: "ev-1", UserID: "u-1", Template: "welcome"},
			again:   json.RawMessage(`{"template": "welcome", "user_id": "u-1", "event_id": "ev-1"}`),
			effects: `SELECT partner_message_id FROM notifications WHERE tenant = $1 AND user_id = 'u-1'`,
			partner: true,
		},
	}
}

// TestEachHandlerHasOneEffect delivers each example's task ten times at
// once and then again after its success: one effect row, at most one
// effect at the partner, and the same result_ref for every delivery.
func TestEachHandlerHasOneEffect(t *testing.T) {
	t.Parallel()
	eachExample(t, []string{"acme"}, func(t *testing.T, ex example, e *bizEnv) {
		tk := task(t, "acme", ex.task, ex.payload)

		const deliveries = 10
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range deliveries {
			wg.Go(func() {
				<-start
				deliverUntilDone(t, e.mux, tk)
			})
		}
		close(start)
		wg.Wait()
		for i := range 3 {
			if err := e.deliver(t, tk); err != nil {
				t.Fatalf("delivery %d after the success: %v", deliveries+i+1, err)
			}
		}

		effects := strings1(t, e.pool, ex.effects, "acme")
		if len(effects) != 1 {
			t.Fatalf("effect rows = %q, want one", effects)
		}
		key, _ := identity(t, ex.task, ex.payload)
		if rec := e.exec(t, "acme", key); rec.Attempts != 1 || rec.ResultRef != effects[0] {
			t.Fatalf("execution = %+v, want one attempt with result %s", rec, effects[0])
		}
		refs := e.results.of("acme", key)
		if len(refs) != deliveries+3 {
			t.Fatalf("%d deliveries reported success, want %d", len(refs), deliveries+3)
		}
		for _, ref := range refs {
			if ref != effects[0] {
				t.Fatalf("result_ref across deliveries = %q, want %s every time", refs, effects[0])
			}
		}
		applied := e.sim.Applied()
		if want := map[bool]int{true: 1}[ex.partner]; len(applied) != want {
			t.Fatalf("partner applied %v, want %d effects", applied, want)
		}
		for id, n := range applied {
			if n != 1 || id != effects[0] {
				t.Fatalf("partner applied %s %d times; want %s once", id, n, effects[0])
			}
		}
	})
}

// eachExample runs check on every example in a parallel subtest with an
// environment of its own, seeded for tenants.
func eachExample(t *testing.T, tenants []string, check func(t *testing.T, ex example, e *bizEnv)) {
	for _, ex := range exampleJobs() {
		t.Run(ex.name, func(t *testing.T) {
			t.Parallel()
			e := newBizEnv(t, partnersim.Options{}, nil)
			for _, tenant := range tenants {
				if ex.seed != nil {
					ex.seed(t, e, tenant)
				}
			}
			check(t, ex, e)
		})
	}
}

// Two tenants submitting the same business fields are two businesses: two
// jobs, two effects, and at the partner two keys of their own.
func TestTenantsHaveTheirOwnEffects(t *testing.T) {
	t.Parallel()
	tenants := []string{"acme", "globex"}
	eachExample(t, tenants, func(t *testing.T, ex example, e *bizEnv) {
		key, _ := identity(t, ex.task, ex.payload)
		for _, tenant := range tenants {
			tk := task(t, tenant, ex.task, ex.payload)
			if err := e.deliver(t, tk); err != nil {
				t.Fatalf("%s's job: %v", tenant, err)
			}
		}
		var refs []string
		for _, tenant := range tenants {
			effects := strings1(t, e.pool, ex.effects, tenant)
			if len(effects) != 1 {
				t.Fatalf("%s's effect rows = %q, want one", tenant, effects)
			}
			if rec := e.exec(t, tenant, key); rec.Status != "succeeded" || rec.ResultRef != effects[0] {
				t.Fatalf("%s's execution = %+v, want succeeded with %s", tenant, rec, effects[0])
			}
			refs = append(refs, effects[0])
		}
		if !ex.partner {
			return
		}
		applied := e.sim.Applied()
		if len(applied) != 2 || refs[0] == refs[1] || applied[refs[0]] != 1 || applied[refs[1]] != 1 {
			t.Fatalf("partner applied %v, tenants recorded %q: want one effect each", applied, refs)
		}
		wantKeys := []string{"acme/" + key, "globex/" + key}
		if got := e.keys.distinct(); !slices.Equal(got, wantKeys) {
			t.Fatalf("Idempotency-Keys sent = %q, want %q", got, wantKeys)
		}
	})
}

// Stock is a tenant's: the same adjustment of the same SKU takes from each
// tenant's own stock, and leaves the other's alone.
func TestTenantsHaveTheirOwnStock(t *testing.T) {
	t.Parallel()
	e := newBizEnv(t, partnersim.Options{}, nil)
	seeds := map[string]int64{"acme": 10, "globex": 4}
	for tenant, n := range seeds {
		if err := SeedInventory(t.Context(), e.pool, tenant, "sku-1", n); err != nil {
			t.Fatal(err)
		}
	}
	adj := InventoryAdjust{AdjustmentID: "adj-1", SKU: "sku-1", Delta: -3}
	if err := e.deliver(t, task(t, "acme", TaskInventoryAdjust, adj)); err != nil {
		t.Fatal(err)
	}
	if got := stockOf(t, e.pool, "globex", "sku-1"); got.Stock != 4 || got.Rows != 0 {
		t.Fatalf("globex after acme's adjustment: %+v, want its 4 untouched", got)
	}
	if err := e.deliver(t, task(t, "globex", TaskInventoryAdjust, adj)); err != nil {
		t.Fatal(err)
	}
	for tenant, n := range seeds {
		if got := stockOf(t, e.pool, tenant, "sku-1"); got.Stock != n-3 || got.Rows != 1 || got.Stock != got.Initial+got.Ledger {
			t.Errorf("%s: %+v, want stock %d = initial + one ledger row", tenant, got, n-3)
		}
	}
	// globex has 1 left: a second take of 3 is refused there only.
	err := e.deliver(t, task(t, "globex", TaskInventoryAdjust, InventoryAdjust{AdjustmentID: "adj-2", SKU: "sku-1", Delta: -3}))
	if !errors.Is(err, ErrInsufficientStock) || !workers.IsPermanent(err) {
		t.Fatalf("globex taking more than it has: %v, want a permanent ErrInsufficientStock", err)
	}
	if err := e.deliver(t, task(t, "acme", TaskInventoryAdjust, InventoryAdjust{AdjustmentID: "adj-2", SKU: "sku-1", Delta: -3})); err != nil {
		t.Fatalf("acme taking 3 of its 7: %v", err)
	}
}

// A second job under a business key that already has its effect, with
// other data, is refused before its handler runs: the job fails for good
// as a conflict and the first effect stands. The same data written
// differently is the same request: a replay.
func TestSameKeyWithAnotherPayload(t *testing.T) {
	t.Parallel()
	eachExample(t, []string{"acme"}, func(t *testing.T, ex example, e *bizEnv) {
		if err := e.deliver(t, task(t, "acme", ex.task, ex.payload)); err != nil {
			t.Fatal(err)
		}
		first := strings1(t, e.pool, ex.effects, "acme")
		requests := e.sim.Stats().Requests

		err := e.deliver(t, task(t, "acme", ex.task, ex.again))
		var conflict *workers.ConflictError
		switch {
		case !ex.conflict && err != nil:
			t.Fatalf("the same payload written differently: %v, want a replay", err)
		case ex.conflict && (!errors.As(err, &conflict) || !workers.IsPermanent(err) ||
			!errors.Is(err, asynq.SkipRetry) || !strings.Contains(err.Error(), "conflict")):
			t.Fatalf("another payload under the same key: %v, want a permanent conflict", err)
		}
		if got := strings1(t, e.pool, ex.effects, "acme"); !slices.Equal(got, first) {
			t.Fatalf("effect rows after the second job = %q, want the first %q untouched", got, first)
		}
		key, _ := identity(t, ex.task, ex.payload)
		if rec := e.exec(t, "acme", key); rec.Status != "succeeded" || rec.ResultRef != first[0] || rec.Attempts != 1 {
			t.Fatalf("execution = %+v, want the first job's success", rec)
		}
		if got := e.sim.Stats().Requests; got != requests {
			t.Fatalf("the second job called the partner (%d requests, was %d)", got, requests)
		}
	})
}

// A payload the job's schema refuses fails at once, for good, naming the
// field, and nothing is written or sent.
func TestInvalidPayloadRunsNothing(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		task    string
		payload any
		field   string
	}{
		{name: "invoice without an amount", task: TaskInvoiceCreate, payload: InvoiceCreate{OrderID: "o-1", Currency: "EUR"}, field: "amount_cents"},
		{name: "zero adjustment", task: TaskInventoryAdjust, payload: InventoryAdjust{AdjustmentID: "a-1", SKU: "s-1"}, field: "delta"},
		{name: "lower-case currency", task: TaskPaymentCharge, payload: PaymentCharge{PaymentID: "p-1", AmountCents: 5, Currency: "eur"}, field: "currency"},
		{name: "notification without a template", task: TaskNotificationSend, payload: NotificationSend{EventID: "e-1", UserID: "u-1"}, field: "template"},
		{name: "a field the job does not have", task: TaskInvoiceCreate, payload: map[string]any{"order_id": "o-1", "amount_cents": 5, "currency": "EUR", "note": "x"}, field: "note"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newBizEnv(t, partnersim.Options{}, nil)
			err := e.deliver(t, task(t, "acme", tt.task, tt.payload))
			if !workers.IsPermanent(err) || !errors.Is(err, asynq.SkipRetry) || !strings.Contains(err.Error(), tt.field) {
				t.Fatalf("delivery: %v, want a permanent refusal naming %s", err, tt.field)
			}
			rows := strings1(t, e.pool, `
SELECT 'invoice' FROM invoices UNION ALL SELECT 'item' FROM inventory_items UNION ALL
SELECT 'payment' FROM payments UNION ALL SELECT 'notification' FROM notifications UNION ALL
SELECT 'execution' FROM job_executions`)
			if len(rows) != 0 || e.sim.Stats().Requests != 0 {
				t.Fatalf("rows %q and %d partner requests after a refused payload, want none", rows, e.sim.Stats().Requests)
			}
		})
	}
}

// offline returns a pool and a Redis client that are never dialled.
func offline(t *testing.T) (*pgxpool.Pool, *redis.Client) {
	t.Helper()
	pool, err := pgxpool.New(t.Context(), "postgres://nobody@127.0.0.1:1/none")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = rdb.Close() })
	return pool, rdb
}

func TestRegister(t *testing.T) {
	t.Parallel()
	pool, rdb := offline(t)
	valid := Business{DB: pool, Redis: rdb, PartnerURL: "http://127.0.0.1:9100"}

	hs := workers.NewHandlers()
	if err := Register(hs, valid); err != nil {
		t.Fatal(err)
	}
	if got, want := hs.Tasks(), slices.Sorted(slices.Values(Tasks())); !slices.Equal(got, want) {
		t.Fatalf("registered %q, want %q", got, want)
	}
	mux, err := hs.Mux(workers.Deps{DB: pool, Redis: rdb}, declaredJobs(t), workers.HTTPDelivery{})
	if err != nil {
		t.Fatalf("the declared jobs lack a handler: %v", err)
	}
	for _, kind := range Tasks() {
		if _, pattern := mux.Handler(asynq.NewTask(kind, nil)); pattern != kind {
			t.Errorf("task %s is handled by pattern %q, want its own", kind, pattern)
		}
	}

	tests := []struct {
		name string
		hs   func() *workers.Handlers
		b    Business
		want []string
	}{
		{
			name: "invalid configuration",
			hs:   workers.NewHandlers,
			b:    Business{PartnerURL: "ftp://partner", PartnerTimeout: -1, DedupWindow: 1500 * time.Millisecond},
			want: []string{"nil DB", "partner URL", "partner timeout", "dedup window"},
		},
		{
			name: "a task registered already",
			hs: func() *workers.Handlers {
				hs := workers.NewHandlers()
				workers.Add(hs, TaskPaymentCharge, func(ctx context.Context, job workers.Job[PaymentCharge]) (string, error) { return "", nil })
				return hs
			},
			b:    valid,
			want: []string{TaskPaymentCharge + " already has a handler"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hs := tt.hs()
			before := hs.Tasks()
			err := Register(hs, tt.b)
			if err == nil {
				t.Fatal("Register succeeded")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Register: %q lacks %q", err, w)
				}
			}
			if got := hs.Tasks(); !slices.Equal(got, before) {
				t.Fatalf("Register added %q despite the error", got)
			}
		})
	}
	if err := Register(nil, valid); err == nil {
		t.Fatal("Register accepted nil handlers")
	}
}

func TestBusinessValidate(t *testing.T) {
	t.Parallel()
	pool, rdb := offline(t)
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
			if !testkit.WantError(t, "Validate", err, tt.want) {
				return
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
		b.Breaker.Failures != 5 || b.Breaker.CoolDown != 30*time.Second || b.DedupWindow != 24*time.Hour || b.Now == nil || b.Logger == nil {
		t.Fatalf("defaults = %+v", b)
	}
	own := &http.Client{}
	set := Business{HTTPClient: own, PartnerTimeout: time.Second, Breaker: BreakerConfig{Failures: 2, CoolDown: time.Minute}, DedupWindow: time.Hour}.withDefaults()
	if set.HTTPClient != own || set.PartnerTimeout != time.Second || set.Breaker.Failures != 2 || set.Breaker.CoolDown != time.Minute || set.DedupWindow != time.Hour {
		t.Fatalf("explicit values overridden: %+v", set)
	}
}
