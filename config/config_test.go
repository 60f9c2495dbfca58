package config

import (
	"errors"
	"flag"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/workers"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden with the problems reported now")

// env is a getenv over a fixed map.
func env(vars map[string]string) func(string) string {
	return func(name string) string { return vars[name] }
}

var runEnv = map[string]string{
	"DATABASE_URL": "postgres://idemgate:secret@127.0.0.1:5432/idemgate?sslmode=disable",
	"REDIS_URL":    "redis://127.0.0.1:6379/0",
}

// minimal is a valid configuration that needs no services; cases append to it.
const minimal = `store: memory
admin_listen: ""
auth: {mode: none}
`

func problems(t *testing.T, err error) []Error {
	t.Helper()
	var ps *Errors
	if !errors.As(err, &ps) {
		t.Fatalf("error %v (%T) is not a *Errors", err, err)
	}
	return ps.List
}

func TestLoadValid(t *testing.T) {
	t.Parallel()
	var partner string
	cfg, err := Load("testdata/valid.yaml", env(runEnv), WithDefaultJobs(exampleJobs(t)), WithSettings(partnerSetting(&partner)))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if w := cfg.Warnings(); len(w) != 0 {
		t.Errorf("Warnings() = %q, want none", w)
	}
	if partner != "http://127.0.0.1:9100" {
		t.Errorf("worker.partner_url reached its setting as %q", partner)
	}
	sec := func(n int) time.Duration { return time.Duration(n) * time.Second }
	for _, tc := range []struct {
		name      string
		got, want any
	}{
		{"listen", cfg.Listen, ":8080"},
		{"admin_token_sha256 (default of ${ADMIN_TOKEN_SHA256:-…})", cfg.AdminTokenSHA256, "1734d503f6aa6a047c36d113cbad769f719c93784b469b771c4c3e7c63adbefd"},
		{"database_url from the environment", cfg.DatabaseURL, runEnv["DATABASE_URL"]},
		{"redis_url from the environment", cfg.RedisURL, runEnv["REDIS_URL"]},
		{"default problem_base", cfg.ProblemBase, "https://idemgate.dev/problems/"},
		{"default rate_limit_store", cfg.RateLimitStore, "memory"},
		{"default log", cfg.Log, Log{Level: "info", Format: "json"}},
		{"default janitor", cfg.Janitor, Janitor{Interval: sec(60), Batch: 1000}},
		{"default proxy", cfg.Proxy, Proxy{DialTimeout: sec(5), ResponseHeaderTimeout: sec(30), IdleConnTimeout: sec(90), MaxIdleConnsPerHost: 256}},
		{"default server", cfg.Server, Server{ReadHeaderTimeout: sec(10), ReadTimeout: sec(60), WriteTimeout: sec(120), IdleTimeout: sec(120), MaxHeaderBytes: 65536, ShutdownTimeout: sec(30), MaxInFlight: 2048}},
		{"default jobs_api.max_waiters", cfg.JobsAPI.MaxWaiters, 1024},
		{"default jobs_api.max_waiters_per_tenant", cfg.JobsAPI.MaxWaitersPerTenant, 16},
		{"default auth.cross_site with auth.mode api_key", cfg.Auth.CrossSite, "allow"},
		{"default worker.shutdown_timeout", cfg.Worker.ShutdownTimeout, workers.DefaultShutdownTimeout},
		{"worker.queues", len(cfg.Worker.Queues) == 1 && cfg.Worker.Queues["default"] == 1, true},
		{"tenants", len(cfg.Tenants), 2},
		{"acme's rate limit", *cfg.Tenants[0].RateLimit, RateLimit{Tokens: 100, Interval: sec(1)}},
		{"globex is not limited", cfg.Tenants[1].RateLimit == nil, true},
		{"routes", len(cfg.Routes), 6},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %v, want %v", tc.name, tc.got, tc.want)
		}
	}

	for _, tc := range []struct {
		route, task, path string
	}{
		{"invoices", "invoice.create", "/v1/invoices"},
		{"inventory-adjustments", "inventory.adjust", "/v1/inventory/adjustments"},
		{"payment-charges", "payment.charge", "/v1/payments/charges"},
		{"notifications", "notification.send", "/v1/notifications"},
	} {
		r, ok := cfg.Route(tc.route)
		if !ok {
			t.Errorf("Route(%q) not found", tc.route)
			continue
		}
		if r.Enqueue == nil || r.Enqueue.Task != tc.task || r.Enqueue.Queue != "default" || r.Path != tc.path {
			t.Errorf("Route(%q): path %q, enqueue %+v; want %s → %s on queue default", tc.route, r.Path, r.Enqueue, tc.path, tc.task)
		}
	}
	payments, ok := cfg.Route("payments")
	if !ok || payments.Upstream != "http://127.0.0.1:9100" || payments.PathPrefix != "/v1/payments" || payments.Timeout != sec(10) {
		t.Errorf("Route(payments) = %+v, %v", payments, ok)
	}
	if _, ok := cfg.Route("nope"); ok {
		t.Error(`Route("nope") found a route`)
	}

	defaults := idempotency.Config{
		Methods: []string{"POST", "PATCH"}, KeySyntax: "compat", MaxKeyLength: 255,
		Retention: sec(24 * 3600), Lease: sec(30), StoreTimeout: sec(2), CommitTimeout: sec(10), WaitInFlight: 0,
		MaxRequestBytes: 1 << 20, MaxStoredResponseBytes: 1 << 20,
		Fingerprint:  idempotency.FingerprintConfig{Headers: []string{}, JSONFields: []string{}},
		OnStoreError: "fail_closed", OnAmbiguous: "release", ForwardKey: "tenant_scoped",
	}
	for _, tc := range []struct {
		route  string
		change func(*idempotency.Config)
	}{
		{"invoices", func(*idempotency.Config) {}},
		{"payments", func(d *idempotency.Config) { d.WaitInFlight = sec(2) }},
		{"notifications", func(d *idempotency.Config) { d.Retention = sec(72 * 3600) }},
		{"inventory-adjustments", func(d *idempotency.Config) {
			d.Fingerprint.JSONFields = []string{"/adjustment_id", "/sku", "/delta"}
		}},
	} {
		want := defaults
		want.Route = tc.route
		want.Methods = slices.Clone(defaults.Methods)
		tc.change(&want)
		r, _ := cfg.Route(tc.route)
		if got := r.Idempotency; !equalIdempotency(got, want) {
			t.Errorf("Route(%q).Idempotency =\n %+v\nwant\n %+v", tc.route, got, want)
		}
	}
}

func equalIdempotency(a, b idempotency.Config) bool {
	return a.Route == b.Route && slices.Equal(a.Methods, b.Methods) &&
		slices.Equal(a.Fingerprint.Headers, b.Fingerprint.Headers) &&
		slices.Equal(a.Fingerprint.JSONFields, b.Fingerprint.JSONFields) &&
		a.KeySyntax == b.KeySyntax && a.MaxKeyLength == b.MaxKeyLength &&
		a.Retention == b.Retention && a.Lease == b.Lease && a.StoreTimeout == b.StoreTimeout && a.CommitTimeout == b.CommitTimeout && a.WaitInFlight == b.WaitInFlight &&
		a.MaxRequestBytes == b.MaxRequestBytes && a.MaxStoredResponseBytes == b.MaxStoredResponseBytes &&
		a.OnStoreError == b.OnStoreError && a.OnAmbiguous == b.OnAmbiguous && a.ForwardKey == b.ForwardKey
}

func TestDefaultsOfAnEmptyFile(t *testing.T) {
	t.Parallel()
	cfg, err := Parse([]byte(minimal), "min.yaml", nil)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if cfg.Listen != ":8080" || cfg.Store != "memory" || cfg.Auth.Header != "Authorization" {
		t.Errorf("listen %q, store %q, auth.header %q", cfg.Listen, cfg.Store, cfg.Auth.Header)
	}
	if cfg.AdminListen != "" {
		t.Errorf(`admin_listen: "" gave %q, want the admin listener off`, cfg.AdminListen)
	}
	if !cfg.Admin.UI {
		t.Error("admin.ui defaults to false, want the console on")
	}
	if cfg.Worker.AdminListen != "127.0.0.1:9091" || cfg.Worker.Concurrency != 10 || cfg.Worker.MaxAttempts != 10 ||
		cfg.Worker.LockTTL != 30*time.Second {
		t.Errorf("worker defaults: %+v", cfg.Worker)
	}
	d := cfg.Idempotency
	if !slices.Equal(d.Methods, []string{"POST", "PATCH"}) || d.Lease != 30*time.Second || d.Retention != 24*time.Hour {
		t.Errorf("idempotency defaults: %+v", d)
	}

	off, err := Parse([]byte(minimal+"admin:\n  ui: false\n"), "ui.yaml", nil)
	if err != nil {
		t.Fatalf("Parse with admin.ui: false: %v", err)
	}
	if off.Admin.UI {
		t.Error("admin.ui: false left the console on")
	}
	if _, err := Parse([]byte(minimal+"admin:\n  ui: maybe\n"), "ui.yaml", nil); err == nil || !strings.Contains(err.Error(), "admin.ui") {
		t.Errorf("admin.ui: maybe: err = %v, want an error naming admin.ui", err)
	}
	if cfg.Admin.MaxAuthFailures != 10 {
		t.Errorf("admin.max_auth_failures defaults to %d, want 10", cfg.Admin.MaxAuthFailures)
	}
	if off, err := Parse([]byte(minimal+"admin:\n  max_auth_failures: -1\n"), "admin.yaml", nil); err != nil || off.Admin.MaxAuthFailures != -1 {
		t.Errorf("admin.max_auth_failures: -1: %+v, %v; want -1, the throttle off", off, err)
	}
	if _, err := Parse([]byte(minimal+"admin:\n  max_auth_failures: -2\n"), "admin.yaml", nil); err == nil ||
		!strings.Contains(err.Error(), "admin.max_auth_failures: must be positive, or -1 to refuse no peer, not -2") {
		t.Errorf("admin.max_auth_failures: -2: err = %v", err)
	}

	// Without the key, the admin listener is on and needs a token.
	_, err = Parse([]byte("store: memory\nauth: {mode: none}\n"), "admin.yaml", nil)
	if err == nil || !strings.Contains(err.Error(), "admin.yaml: admin_token_sha256: required while admin_listen is set") {
		t.Errorf("no admin_listen key and no token: err = %v", err)
	}
}
