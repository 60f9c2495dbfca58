package browsertest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"text/template"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgate/idemgate/examples"
	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/internal/testkit/proc"
	"github.com/idemgate/idemgate/migrations"
)

// The processes the console is tested against: gateways and workers run
// from idemgate-examples, each a child in a process group of its own that
// the test kills when it ends.

const (
	adminToken = "console-admin-token"
	apiKey     = "acme-key"
	tenant     = "acme"
)

var configTemplate = template.Must(template.New("config").Parse(`listen: "127.0.0.1:{{.Public}}"
admin_listen: "127.0.0.1:{{.Admin}}"
admin_token_sha256: "{{.AdminTokenSHA}}"
store: postgres
database_url: "{{.DatabaseURL}}"
redis_url: "{{.RedisURL}}"
log: {level: info, format: text}
auth: {mode: api_key}
tenants:
  - name: ` + tenant + `
    api_key_sha256: ["{{.APIKeySHA}}"]
server: {shutdown_timeout: 5s}
worker:
  admin_listen: "127.0.0.1:{{.WorkerAdmin}}"
  concurrency: 4
  queues: {"{{.Queue}}": 1}
  # Long enough that the killed worker's job is still processing when
  # its page opens; the relay hands it to another worker about a lock_ttl
  # after the kill.
  lock_ttl: 15s
  max_attempts: 25
  shutdown_timeout: 5s
  # Only the console requeues the job the test makes stuck.
  requeue_after: 1h
  partner_url: "{{.PartnerURL}}"
routes:
  - {name: charges, methods: [POST], path: /v1/payments/charges, enqueue: {task: payment.charge, queue: "{{.Queue}}"}}
  - {name: slow, methods: [POST], path: /v1/slow, upstream: "{{.UpstreamURL}}", idempotency: {lease: 2s}}
  - {name: pages, methods: [POST], path: /v1/pages, upstream: "{{.UpstreamURL}}"}
  - {name: invoices, methods: [POST], path: /v1/invoices, enqueue: {task: invoice.create}, batch: {path: "/v1/invoices:batch"}}
# The invoices wait in a fairness pool and a schedule submits one an
# hour, for the fairness, schedule and batch pages.
jobs:
  - task: invoice.create
    queue: "{{.Queue}}"
    schema_file: "{{.InvoiceSchema}}"
    business_key: "invoice:{order_id}"
    resource: "order:{order_id}"
    fairness: tenants
fairness:
  - {name: tenants, weights: {` + tenant + `: 3}, window: 4}
schedules:
  - {id: hourly-invoice, tenant: ` + tenant + `, task: invoice.create, every: 1h, body: {order_id: hourly, amount_cents: 100, currency: EUR}}
`))

// config is one process's configuration.
type config struct {
	Public, Admin, WorkerAdmin int
	AdminTokenSHA, APIKeySHA   string
	DatabaseURL, RedisURL      string
	Queue                      string
	PartnerURL, UpstreamURL    string
	InvoiceSchema              string
}

func sha(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }

// stack is one test's gateway, workers, stores, partner and upstream.
type stack struct {
	t        *testing.T
	bin      string
	dir      string
	base     config // ports are filled per process
	pool     *pgxpool.Pool
	partner  *partner
	upstream *upstream
	console  *member // the gateway whose admin listener the browser visits
}

// newStack prepares a database of the test's own (idemgate's and the
// examples' migrations), a queue name of its own on TEST_REDIS_URL, the
// partner and the upstream; it starts no idemgate process yet.
func newStack(t *testing.T) *stack {
	t.Helper()
	dbURL := testkit.Postgres(t, exampleTables())
	redisURL := testkit.RedisURL(t)
	s := &stack{t: t, bin: examplesBinary(t), dir: t.TempDir(), pool: testkit.PoolAt(t, dbURL)}
	s.partner = newPartner(t)
	s.upstream = newUpstream(t)
	s.base = config{
		AdminTokenSHA: sha(adminToken), APIKeySHA: sha(apiKey),
		DatabaseURL: dbURL, RedisURL: redisURL, Queue: "console-" + randomID(),
		PartnerURL: s.partner.srv.URL, UpstreamURL: s.upstream.srv.URL,
		InvoiceSchema: invoiceSchema(t),
	}
	return s
}

// invoiceSchema is the absolute path of invoice.create's schema.
func invoiceSchema(t *testing.T) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join(root, "examples", "schemas", "invoice.create.json"))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func exampleTables() migrations.Set {
	m := examples.Migrations()
	return migrations.Set{FS: m.FS, Table: m.Table}
}

// examplesBinary is IDEMGATE_EXAMPLES_BIN when set (make screenshots
// builds bin/idemgate-examples), else idemgate-examples built into the
// test's directory: after the first build the go command's cache makes it
// a link.
func examplesBinary(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("IDEMGATE_EXAMPLES_BIN"); bin != "" {
		return bin
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the test builds idemgate-examples and needs go on PATH: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "idemgate-examples")
	build := exec.CommandContext(t.Context(), gobin, "build", "-o", bin, "./examples/cmd/idemgate-examples")
	build.Dir = root // the main module builds it with its own go.mod
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build idemgate-examples: %v\n%s", err, out)
	}
	return bin
}

// member is one idemgate process: a gateway (serve) or a worker.
type member struct {
	name   string
	cfg    config
	log    string // its stdout and stderr
	p      *proc.Proc
	health string
}

// public and admin are the gateway's listeners.
func (m *member) public() string { return fmt.Sprintf("http://127.0.0.1:%d", m.cfg.Public) }
func (m *member) admin() string  { return fmt.Sprintf("http://127.0.0.1:%d", m.cfg.Admin) }

// start runs `idemgate-examples COMMAND --config FILE` with free ports and
// waits until it answers its health check; the test kills it when it ends
// and shows the end of its log if it failed.
func (s *stack) start(name, command string) *member {
	s.t.Helper()
	cfg := s.base
	for _, p := range []*int{&cfg.Public, &cfg.Admin, &cfg.WorkerAdmin} {
		port, err := proc.FreePort()
		if err != nil {
			s.t.Fatal(err)
		}
		*p = port
	}
	var b bytes.Buffer
	if err := configTemplate.Execute(&b, cfg); err != nil {
		s.t.Fatal(err)
	}
	path := filepath.Join(s.dir, name+".yaml")
	if err := os.WriteFile(path, b.Bytes(), 0o600); err != nil {
		s.t.Fatal(err)
	}
	m := &member{name: name, cfg: cfg, log: filepath.Join(s.dir, name+".log")}
	m.health = m.public() + "/healthz"
	if command == "worker" {
		m.health = fmt.Sprintf("http://127.0.0.1:%d/healthz", cfg.WorkerAdmin)
	}
	log, err := os.Create(m.log)
	if err != nil {
		s.t.Fatal(err)
	}
	m.p, err = proc.Start(proc.Spec{Name: name, Path: s.bin, Args: []string{command, "--config", path}, Env: proc.ChildEnv(), Log: log})
	_ = log.Close() // the child holds its own descriptor
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() {
		m.p.Stop(syscall.SIGTERM, 10*time.Second)
		if s.t.Failed() {
			out, _ := os.ReadFile(m.log)
			s.t.Logf("%s log (last 3000 bytes):\n%s", name, tail(string(out), 3000))
		}
	})
	client := &http.Client{Timeout: time.Second}
	defer client.CloseIdleConnections()
	err = proc.WaitUntil(s.t.Context(), time.Minute, name+" up", m.p, func(ctx context.Context) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, m.health, nil)
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s", m.health, resp.Status)
		}
		return nil
	})
	if err != nil {
		out, _ := os.ReadFile(m.log)
		s.t.Fatalf("%v\n%s", err, tail(string(out), 3000))
	}
	return m
}

// kill ends the member at once, as a crash does.
func (m *member) kill() { m.p.Kill() }

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// answer is a response read whole.
type answer struct {
	status int
	header http.Header
	body   []byte
}

// post sends body to the gateway at base with the tenant's API key and
// the Idempotency-Key key.
func post(ctx context.Context, base, path, key, body string) (answer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+path, strings.NewReader(body))
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+apiKey)
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, header: resp.Header, body: b}, err
}

// submitPayment enqueues a payment.charge through g and returns its job id.
func (s *stack) submitPayment(g *member, paymentID string) string {
	s.t.Helper()
	body := fmt.Sprintf(`{"payment_id":%q,"amount_cents":1250,"currency":"EUR"}`, paymentID)
	a, err := post(s.t.Context(), g.public(), "/v1/payments/charges", "key-"+paymentID, body)
	if err != nil {
		s.t.Fatalf("submit payment %s: %v", paymentID, err)
	}
	if a.status != http.StatusAccepted {
		s.t.Fatalf("submit payment %s: %d %s", paymentID, a.status, a.body)
	}
	id, ok := strings.CutPrefix(a.header.Get("Location"), "/v1/jobs/")
	if !ok {
		s.t.Fatalf("submit payment %s: Location %q", paymentID, a.header.Get("Location"))
	}
	return id
}

// dropTask deletes the job's task from asynq, as a broker that lost it
// would: the job stays queued in PostgreSQL with nothing to run it.
func (s *stack) dropTask(id string) {
	s.t.Helper()
	opt, err := asynq.ParseRedisURI(s.base.RedisURL)
	if err != nil {
		s.t.Fatal(err)
	}
	in := asynq.NewInspector(opt)
	defer in.Close()
	if err := in.DeleteTask(s.base.Queue, id); err != nil {
		s.t.Fatalf("delete the task of %s: %v", id, err)
	}
}

// count runs a count(*) query.
func (s *stack) count(q string, args ...any) int {
	s.t.Helper()
	var n int
	if err := s.pool.QueryRow(s.t.Context(), q, args...).Scan(&n); err != nil {
		s.t.Fatalf("%s: %v", q, err)
	}
	return n
}

func randomID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
