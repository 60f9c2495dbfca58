package invariants_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/idemgate/idemgate/examples"
	"github.com/idemgate/idemgate/examples/invariants"
	"github.com/idemgate/idemgate/examples/partnersim"
	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/migrations"
	"github.com/idemgate/idemgate/reconcile"
	"github.com/idemgate/idemgate/workers"
	"github.com/idemgate/idemgate/workers/execution"
	"github.com/idemgate/idemgate/workers/lock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// specs declares the four example jobs from their schema files, with the
// business keys and resources of examples.JobsYAML.
func specs(t *testing.T) []*job.Spec {
	t.Helper()
	templates := []struct{ task, key, resource string }{
		{examples.TaskInvoiceCreate, "invoice:{order_id}", "order:{order_id}"},
		{examples.TaskInventoryAdjust, "inventory:{adjustment_id}", "sku:{sku}"},
		{examples.TaskPaymentCharge, "payment:{payment_id}", "payment:{payment_id}"},
		{examples.TaskNotificationSend, "email:{template}:{user_id}:{event_id}", "user:{user_id}"},
	}
	var out []*job.Spec
	for _, tpl := range templates {
		file := filepath.Join("..", "schemas", tpl.task+".json")
		doc, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		spec, err := job.NewSpec(tpl.task, doc, tpl.key, tpl.resource)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, spec)
	}
	return out
}

// world is a schema whose business tables the real handlers filled for two
// tenants submitting the same business ids, with the public job record of
// every job, and the partner they called.
type world struct {
	pool    *pgxpool.Pool
	sim     *partnersim.Sim
	partner *httptest.Server
	// refs is each job's result_ref by tenant-scoped business key
	// ("acme/invoice:o-1"): the invoice id, the adjustment id, the charge
	// id, the message id.
	refs map[string]string
}

// tenants submit the same jobs.
var tenants = []string{"acme", "globex"}

// submitted is one job of the world.
type submitted struct {
	task    string
	payload any
	key     string // its business key, as declared
}

// The jobs each tenant runs.
var jobs = []submitted{
	{examples.TaskInvoiceCreate, examples.InvoiceCreate{OrderID: "o-1", AmountCents: 1000, Currency: "EUR"}, "invoice:o-1"},
	{examples.TaskInvoiceCreate, examples.InvoiceCreate{OrderID: "o-2", AmountCents: 2000, Currency: "EUR"}, "invoice:o-2"},
	{examples.TaskInventoryAdjust, examples.InventoryAdjust{AdjustmentID: "a-1", SKU: "A", Delta: 3}, "inventory:a-1"},
	{examples.TaskInventoryAdjust, examples.InventoryAdjust{AdjustmentID: "a-2", SKU: "A", Delta: -2}, "inventory:a-2"},
	{examples.TaskInventoryAdjust, examples.InventoryAdjust{AdjustmentID: "a-3", SKU: "B", Delta: 4}, "inventory:a-3"},
	{examples.TaskInventoryAdjust, examples.InventoryAdjust{AdjustmentID: "a-4", SKU: "C", Delta: 2}, "inventory:a-4"}, // a SKU nobody seeded
	{examples.TaskPaymentCharge, examples.PaymentCharge{PaymentID: "p-1", AmountCents: 500, Currency: "IDR"}, "payment:p-1"},
	{examples.TaskPaymentCharge, examples.PaymentCharge{PaymentID: "p-2", AmountCents: 700, Currency: "IDR"}, "payment:p-2"},
	{examples.TaskNotificationSend, examples.NotificationSend{EventID: "e-1", UserID: "u-1", Template: "welcome"}, "email:welcome:u-1:e-1"},
	{examples.TaskNotificationSend, examples.NotificationSend{EventID: "e-2", UserID: "u-1", Template: "receipt"}, "email:receipt:u-1:e-2"},
}

func jobID(tenant, key string) string {
	return "job_" + tenant + "_" + strings.NewReplacer(":", "_").Replace(key)
}

func newWorld(t *testing.T) *world {
	t.Helper()
	ctx := t.Context()
	w := &world{pool: testkit.Pool(t, migrations.Set{FS: examples.Migrations().FS, Table: examples.MigrationTable}), sim: partnersim.New(partnersim.Options{}), refs: map[string]string{}}
	rdb := testkit.Redis(t)
	prefix := testkit.Prefix()
	w.partner = httptest.NewServer(w.sim)
	t.Cleanup(w.partner.Close)
	records := job.NewStore(w.pool)
	deps := workers.Deps{
		DB:    w.pool,
		Redis: rdb,
		Lock:  lock.Options{Prefix: prefix, TTL: 20 * time.Second},
		// As `idemgate worker` does: the job record follows the execution.
		OnStatus: func(ctx context.Context, task *asynq.Task, key string, status job.Status, attempts int, resultRef, lastErr string) error {
			if err := records.Follow(ctx, task, key, status, attempts, resultRef, lastErr); err != nil {
				t.Errorf("job status: %v", err)
			}
			return nil
		},
	}
	hs := workers.NewHandlers()
	if err := examples.Register(hs, examples.Business{DB: w.pool, Redis: rdb, PartnerURL: w.partner.URL, DedupPrefix: prefix}); err != nil {
		t.Fatal(err)
	}
	mux, err := hs.Mux(deps, specs(t), workers.HTTPDelivery{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tenant := range tenants {
		for sku, n := range map[string]int64{"A": 10, "B": 5} {
			if err := examples.SeedInventory(ctx, w.pool, tenant, sku, n); err != nil {
				t.Fatal(err)
			}
		}
		for _, j := range jobs {
			w.run(t, mux, tenant, j)
		}
	}
	return w
}

// run submits j for tenant as the gateway would (a job record and its
// task) and delivers the task twice, as a queue may.
func (w *world) run(t *testing.T, mux *asynq.ServeMux, tenant string, j submitted) {
	t.Helper()
	ctx := t.Context()
	body, err := json.Marshal(j.payload)
	if err != nil {
		t.Fatal(err)
	}
	id := jobID(tenant, j.key)
	_, err = w.pool.Exec(ctx, `
INSERT INTO jobs (id, tenant, route, idempotency_key, task, queue, business_key, payload)
VALUES ($1, $2, 'route', $1, $3, 'default', $4, $5)`, id, tenant, j.task, j.key, body)
	if err != nil {
		t.Fatal(err)
	}
	task := asynq.NewTaskWithHeaders(j.task, body, map[string]string{job.HeaderID: id, job.HeaderTenant: tenant})
	for range 2 {
		if err := mux.ProcessTask(ctx, task); err != nil {
			t.Fatalf("%s of %s: %v", j.key, tenant, err)
		}
	}
	if err := w.pool.QueryRow(ctx, `SELECT result_ref FROM jobs WHERE id = $1 AND status = 'succeeded'`, id).Scan(new(string)); err != nil {
		t.Fatalf("job %s not succeeded: %v", id, err)
	}
	var ref string
	if err := w.pool.QueryRow(ctx, `SELECT result_ref FROM job_executions WHERE tenant = $1 AND key = $2`, tenant, j.key).Scan(&ref); err != nil {
		t.Fatal(err)
	}
	w.refs[workers.Scope(tenant, j.key)] = ref
}

func (w *world) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := w.pool.Exec(t.Context(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// chargeAgain makes the partner charge acme's payment p-1 a second time
// under another Idempotency-Key: what a client that made up a key per
// attempt would do.
func (w *world) chargeAgain(t *testing.T) string {
	t.Helper()
	body, err := json.Marshal(jobs[6].payload)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, w.partner.URL+"/charges", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Idempotency-Key", "acme/payment:p-1:attempt-2")
	resp, err := w.partner.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var charge struct{ ID string }
	if err := json.NewDecoder(resp.Body).Decode(&charge); err != nil || charge.ID == "" {
		t.Fatalf("second charge: %d, %v", resp.StatusCode, err)
	}
	return charge.ID
}

// Two tenants ran the same business ids: two of everything, and nothing
// is a duplicate.
func TestRunOnCleanData(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	var out bytes.Buffer
	rep, err := invariants.Run(t.Context(), w.pool, &out, invariants.Options{
		Options:        reconcile.Options{ProgressEvery: 2},
		PartnerEffects: func(context.Context) (map[string]int, error) { return w.sim.Applied(), nil },
		PartnerApplied: func(context.Context) (int64, error) { return w.sim.Stats().Applied, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Clean() {
		t.Fatalf("violations on clean data: %v\n%s", rep.Violations, out.String())
	}
	n := int64(len(tenants))
	want := map[string]int64{
		invariants.CheckInvoices:   2 * n,
		invariants.CheckStock:      3 * n,
		invariants.CheckPayments:   2 * n,
		invariants.CheckJobs:       int64(len(jobs)) * n,
		invariants.CheckJobEffects: int64(len(jobs)) * n,
		invariants.CheckEffectJobs: int64(len(jobs)) * n,
		invariants.CheckPartner:    4 * n,
	}
	if !maps.Equal(rep.Rows, want) {
		t.Fatalf("rows checked = %v, want %v", rep.Rows, want)
	}
	if applied := w.sim.Applied(); len(applied) != 4*len(tenants) {
		t.Fatalf("the partner applied %d effects, want %d: one per payment and message of each tenant", len(applied), 4*len(tenants))
	}
	for _, line := range []string{"reconcile: jobs: 10 rows checked\n", "reconcile: stock: 6 rows, 0 violations\n", "reconcile: clean\n"} {
		if !strings.Contains(out.String(), line) {
			t.Errorf("output lacks %q:\n%s", line, out.String())
		}
	}
}

func TestRunReportsPlantedViolations(t *testing.T) {
	t.Parallel()
	type want struct {
		check string
		ids   []string
	}
	notification := "acme/" + jobs[8].key
	tests := []struct {
		name string
		// plant breaks the world and returns the violations it must cause.
		plant func(t *testing.T, w *world) []want
		// opts adjusts the run; the partner's account is always given.
		opts func(w *world, o *invariants.Options)
	}{
		{
			name: "a second invoice for an order",
			plant: func(t *testing.T, w *world) []want {
				w.exec(t, `ALTER TABLE invoices DROP CONSTRAINT invoices_tenant_order_id_key`)
				w.exec(t, `INSERT INTO invoices (id, tenant, order_id, amount_cents, currency, job_key, fencing_token)
				           VALUES ('inv_planted', 'acme', 'o-1', 1000, 'EUR', 'invoice:o-1', 1)`)
				return []want{{invariants.CheckInvoices, []string{"acme/o-1", w.refs["acme/invoice:o-1"], "inv_planted"}}}
			},
		},
		{
			name: "stock that drifted from its ledger",
			plant: func(t *testing.T, w *world) []want {
				w.exec(t, `UPDATE inventory_items SET stock = stock + 7 WHERE tenant = 'globex' AND sku = 'A'`)
				return []want{{invariants.CheckStock, []string{"globex/A"}}}
			},
		},
		{
			name: "a ledger row for an unknown SKU",
			plant: func(t *testing.T, w *world) []want {
				w.exec(t, `ALTER TABLE inventory_ledger DROP CONSTRAINT inventory_ledger_tenant_sku_fkey`)
				w.exec(t, `INSERT INTO inventory_ledger (tenant, adjustment_id, sku, delta, job_key, fencing_token)
				           VALUES ('acme', 'a-x', 'Z', 5, 'inventory:a-x', 1)`)
				return []want{
					{invariants.CheckStock, []string{"acme/Z", "a-x"}},
					{invariants.CheckEffectJobs, []string{"acme/inventory:a-x", "a-x"}},
				}
			},
		},
		{
			name: "a succeeded payment without its charge",
			plant: func(t *testing.T, w *world) []want {
				w.exec(t, `ALTER TABLE payments DROP CONSTRAINT payments_check`)
				w.exec(t, `UPDATE payments SET partner_charge_id = NULL WHERE tenant = 'acme' AND payment_id = 'p-1'`)
				charge := w.refs["acme/payment:p-1"]
				return []want{
					{invariants.CheckPayments, []string{"acme/p-1"}},
					{invariants.CheckJobEffects, []string{"acme/payment:p-1", charge}},
					{invariants.CheckPartner, []string{charge}},
				}
			},
		},
		{
			name: "two tenants' payments holding one charge",
			plant: func(t *testing.T, w *world) []want {
				w.exec(t, `ALTER TABLE payments DROP CONSTRAINT payments_partner_charge_id_key`)
				w.exec(t, `UPDATE payments SET partner_charge_id = $1 WHERE tenant = 'globex' AND payment_id = 'p-1'`, w.refs["acme/payment:p-1"])
				c1, c2 := w.refs["acme/payment:p-1"], w.refs["globex/payment:p-1"]
				return []want{
					{invariants.CheckPayments, []string{c1, "acme/p-1", "globex/p-1"}},
					{invariants.CheckJobEffects, []string{"globex/payment:p-1", c2, c1}},
					{invariants.CheckPartner, []string{c2}},
				}
			},
		},
		{
			name: "a duplicate charge at the partner",
			plant: func(t *testing.T, w *world) []want {
				return []want{{invariants.CheckPartner, []string{w.chargeAgain(t)}}}
			},
		},
		{
			name: "a duplicate charge at a partner that only counts",
			plant: func(t *testing.T, w *world) []want {
				w.chargeAgain(t)
				return []want{{invariants.CheckPartner, nil}}
			},
			opts: func(w *world, o *invariants.Options) {
				o.PartnerEffects = nil
				o.PartnerApplied = invariants.StatsApplied(w.partner.Client(), w.partner.URL)
			},
		},
		{
			name: "a charge the partner applied twice",
			plant: func(t *testing.T, w *world) []want {
				return []want{{invariants.CheckPartner, []string{"globex/p-2", w.refs["globex/payment:p-2"]}}}
			},
			opts: func(w *world, o *invariants.Options) {
				o.PartnerApplied = nil
				o.PartnerEffects = func(context.Context) (map[string]int, error) {
					applied := w.sim.Applied()
					applied[w.refs["globex/payment:p-2"]]++
					return applied, nil
				}
			},
		},
		{
			name: "a message the partner never sent",
			plant: func(t *testing.T, w *world) []want {
				return []want{{invariants.CheckPartner, []string{notification, w.refs[notification]}}}
			},
			opts: func(w *world, o *invariants.Options) {
				o.PartnerApplied = nil
				o.PartnerEffects = func(context.Context) (map[string]int, error) {
					applied := w.sim.Applied()
					delete(applied, w.refs[notification])
					return applied, nil
				}
			},
		},
		{
			name: "a succeeded job whose effect is gone",
			plant: func(t *testing.T, w *world) []want {
				w.exec(t, `DELETE FROM invoices WHERE tenant = 'acme' AND order_id = 'o-2'`)
				return []want{{invariants.CheckJobEffects, []string{"acme/invoice:o-2", w.refs["acme/invoice:o-2"]}}}
			},
		},
		{
			name: "an effect filed under another tenant",
			plant: func(t *testing.T, w *world) []want {
				w.exec(t, `UPDATE invoices SET tenant = 'initech' WHERE tenant = 'globex' AND order_id = 'o-2'`)
				ref := w.refs["globex/invoice:o-2"]
				return []want{
					{invariants.CheckJobEffects, []string{"globex/invoice:o-2", ref}},
					{invariants.CheckEffectJobs, []string{"initech/invoice:o-2", ref}},
				}
			},
		},
		{
			name: "an effect no job made",
			plant: func(t *testing.T, w *world) []want {
				w.exec(t, `INSERT INTO invoices (id, tenant, order_id, amount_cents, currency, job_key, fencing_token)
				           VALUES ('inv_orphan', 'acme', 'o-9', 1000, 'EUR', 'invoice:o-9', 1)`)
				return []want{{invariants.CheckEffectJobs, []string{"acme/invoice:o-9", "inv_orphan"}}}
			},
		},
		{
			name: "an effect no job made, within the grace period",
			plant: func(t *testing.T, w *world) []want {
				w.exec(t, `INSERT INTO invoices (id, tenant, order_id, amount_cents, currency, job_key, fencing_token)
				           VALUES ('inv_orphan', 'acme', 'o-9', 1000, 'EUR', 'invoice:o-9', 1)`)
				return nil
			},
			opts: func(w *world, o *invariants.Options) { o.Grace = time.Hour },
		},
		{
			name: "a succeeded job whose execution is not",
			plant: func(t *testing.T, w *world) []want {
				w.exec(t, `UPDATE job_executions SET status = 'processing' WHERE tenant = 'acme' AND key = 'invoice:o-1'`)
				return []want{
					{invariants.CheckJobs, []string{jobID("acme", "invoice:o-1"), "acme/invoice:o-1"}},
					{invariants.CheckEffectJobs, []string{"acme/invoice:o-1", w.refs["acme/invoice:o-1"]}},
				}
			},
		},
		{
			name: "a job showing another result than its execution",
			plant: func(t *testing.T, w *world) []want {
				w.exec(t, `UPDATE jobs SET result_ref = 'inv_other' WHERE tenant = 'globex' AND business_key = 'invoice:o-1'`)
				return []want{{invariants.CheckJobs, []string{jobID("globex", "invoice:o-1"), "globex/invoice:o-1", "inv_other", w.refs["globex/invoice:o-1"]}}}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t)
			wants := tt.plant(t, w)
			opts := invariants.Options{
				PartnerEffects: func(context.Context) (map[string]int, error) { return w.sim.Applied(), nil },
				PartnerApplied: func(context.Context) (int64, error) { return w.sim.Stats().Applied, nil },
			}
			if tt.opts != nil {
				tt.opts(w, &opts)
			}
			var out bytes.Buffer
			rep, err := invariants.Run(t.Context(), w.pool, &out, opts)
			if err != nil {
				t.Fatal(err)
			}
			var got []want
			for _, v := range rep.Violations {
				got = append(got, want{v.Check, v.IDs})
				if !strings.Contains(out.String(), v.String()+"\n") {
					t.Errorf("violation %q not in the output", v)
				}
				// A violation about a job that ran names its attempts from
				// the ledger: the one that succeeded, with its token.
				if v.Check == invariants.CheckJobs || v.Check == invariants.CheckJobEffects {
					i := slices.IndexFunc(v.Attempts, func(a execution.Entry) bool {
						return a.Outcome == execution.OutcomeSucceeded && a.FencingToken > 0
					})
					if i < 0 {
						t.Errorf("violation %q names no succeeded attempt: %+v", v.Detail, v.Attempts)
					} else if line := fmt.Sprintf("  attempt %d token %d succeeded", v.Attempts[i].Attempt, v.Attempts[i].FencingToken); !strings.Contains(out.String(), line) {
						t.Errorf("output lacks %q:\n%s", line, out.String())
					}
				}
			}
			same := slices.EqualFunc(got, wants, func(a, b want) bool { return a.check == b.check && slices.Equal(a.ids, b.ids) })
			if !same {
				t.Fatalf("violations:\n%v\nwant:\n%v\noutput:\n%s", got, wants, out.String())
			}
			if rep.Clean() != (len(wants) == 0) {
				t.Fatalf("Clean() = %v with %d violations", rep.Clean(), len(rep.Violations))
			}
			if len(wants) > 0 && !strings.Contains(out.String(), fmt.Sprintf("reconcile: %d violation", len(wants))) {
				t.Errorf("output lacks the summary:\n%s", out.String())
			}
		})
	}
}

func TestStatsApplied(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		status  int
		body    string
		want    int64
		wantErr bool
	}{
		{name: "partnersim stats", status: 200, body: `{"requests":9,"applied":4,"replayed":5}`, want: 4},
		{name: "nothing applied yet", status: 200, body: `{"requests":0,"applied":0,"replayed":0}`, want: 0},
		{name: "no applied count", status: 200, body: `{"requests":9}`, wantErr: true},
		{name: "not JSON", status: 200, body: `ok`, wantErr: true},
		{name: "error status", status: 503, body: `{"applied":4}`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method != http.MethodGet || r.URL.Path != "/stats" {
					http.NotFound(w, r)
					return
				}
				w.WriteHeader(tt.status)
				_, _ = w.Write([]byte(tt.body))
			}))
			t.Cleanup(srv.Close)
			got, err := invariants.StatsApplied(srv.Client(), srv.URL+"/")(t.Context())
			if got != tt.want || (err != nil) != tt.wantErr {
				t.Fatalf("StatsApplied = %d, %v; want %d, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

// A job left unfinished, its record unchanged for longer than StuckAfter,
// is reported with its status, task, age and where its task is; a job that
// changed recently, and a finished one, are not.
func TestStuckJobs(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	plant := func(id, status, age string) {
		w.exec(t, `
INSERT INTO jobs (id, tenant, route, idempotency_key, task, queue, business_key, payload, status, updated_at)
VALUES ($1, 'acme', 'invoices', $1, 'invoice.create', 'bulk', 'invoice:' || $1, '{}', $2, now() - $3::interval)`, id, status, age)
	}
	plant("job_lost", "queued", "2 hours")
	plant("job_waiting", "retrying", "20 minutes")
	plant("job_recent", "processing", "1 minute")
	plant("job_failed", "failed", "3 hours")
	states := map[string]string{"job_waiting": "retry"}
	var asked []string
	opts := invariants.Options{Options: reconcile.Options{
		StuckAfter: 15 * time.Minute,
		TaskState: func(_ context.Context, queue, id string) (string, error) {
			asked = append(asked, queue+"/"+id)
			return states[id], nil
		},
	}}
	var out bytes.Buffer
	rep, err := invariants.Run(t.Context(), w.pool, &out, opts)
	if err != nil {
		t.Fatal(err)
	}
	// Detail is a pattern: the age is the record's, seconds later.
	want := []reconcile.Violation{
		{Check: reconcile.CheckStuckJobs, IDs: []string{"job_lost", "acme/invoice:job_lost"},
			Detail: `^invoice\.create job job_lost is queued, unchanged for 2h0m\d+s; its task is missing from queue bulk$`},
		{Check: reconcile.CheckStuckJobs, IDs: []string{"job_waiting", "acme/invoice:job_waiting"},
			Detail: `^invoice\.create job job_waiting is retrying, unchanged for 20m\d+s; its task is retry in queue bulk$`},
	}
	if !slices.EqualFunc(rep.Violations, want, func(a, b reconcile.Violation) bool {
		return a.Check == b.Check && slices.Equal(a.IDs, b.IDs) && regexp.MustCompile(b.Detail).MatchString(a.Detail)
	}) {
		t.Fatalf("violations:\n%v\nwant:\n%v\noutput:\n%s", rep.Violations, want, out.String())
	}
	if !slices.Equal(asked, []string{"bulk/job_lost", "bulk/job_waiting"}) {
		t.Errorf("tasks looked up: %q, want the stuck jobs' only", asked)
	}
	if rep.Rows[reconcile.CheckStuckJobs] != 2 || !strings.Contains(out.String(), "reconcile: stuck_jobs: 2 rows, 2 violations\n") {
		t.Errorf("rows %v; output:\n%s", rep.Rows, out.String())
	}

	// Without TaskState the report says so; without StuckAfter the check
	// does not run.
	out.Reset()
	rep, err = invariants.Run(t.Context(), w.pool, &out, invariants.Options{Options: reconcile.Options{StuckAfter: time.Hour}})
	if err != nil || len(rep.Violations) != 1 || !strings.HasSuffix(rep.Violations[0].Detail, "; its task was not looked up") {
		t.Fatalf("without TaskState: %v %v", rep.Violations, err)
	}
	rep, err = invariants.Run(t.Context(), w.pool, &out, invariants.Options{})
	if _, ran := rep.Rows[reconcile.CheckStuckJobs]; err != nil || !rep.Clean() || ran {
		t.Fatalf("without StuckAfter: %v %v, rows %v", rep.Violations, err, rep.Rows)
	}
}
