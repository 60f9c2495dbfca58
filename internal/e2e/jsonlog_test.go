package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemgate/idemgate/gateway"
	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/internal/tlsfiles/tlsfilestest"
)

// childProc is `idemgate ARGS` run as a process of its own, its stdout
// and stderr kept apart.
type childProc struct {
	cmd         *exec.Cmd
	out, errOut *testkit.SyncBuffer
	done        chan error
}

func startProcess(t *testing.T, args ...string) *childProc {
	t.Helper()
	cmd := childCommand(args...)
	c := &childProc{cmd: cmd, out: &testkit.SyncBuffer{}, errOut: &testkit.SyncBuffer{}, done: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = c.out, c.errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { c.done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-c.done
	})
	return c
}

// listening waits for the process to announce the listener name.
func (c *childProc) listening(t *testing.T, name string) string {
	t.Helper()
	var url string
	testkit.Eventually(t, name+" listening", 60*time.Second, func() bool {
		select {
		case err := <-c.done:
			c.done <- err
			t.Fatalf("exited before listening: %v\nstderr:\n%s", err, tail(c.errOut.String(), 4000))
		default:
		}
		url = addrs(c.out.String())[name]
		return url != ""
	})
	return url
}

// stop sends SIGTERM and waits for a clean exit.
func (c *childProc) stop(t *testing.T) {
	t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-c.done:
		c.done <- err
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\nstderr:\n%s", err, tail(c.errOut.String(), 4000))
		}
	case <-time.After(60 * time.Second):
		t.Fatal("no exit 60s after SIGTERM")
	}
}

// allJSON fails the test for every line of out that is not a JSON object,
// and returns the objects.
func allJSON(t *testing.T, stream, out string) []map[string]any {
	t.Helper()
	var objs []map[string]any
	if out == "" {
		return nil
	}
	for i, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Errorf("%s line %d is not a JSON object: %q", stream, i+1, line)
			continue
		}
		objs = append(objs, m)
	}
	return objs
}

func has(objs []map[string]any, match func(map[string]any) bool) bool {
	for _, m := range objs {
		if match(m) {
			return true
		}
	}
	return false
}

func getStatus(t *testing.T, url, token string) int {
	t.Helper()
	hr, _ := http.NewRequest(http.MethodGet, url, nil)
	if token != "" {
		hr.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := client.Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode
}

// TestJSONLogsOnly: with log.format json (the default), every line
// `idemgate serve` and `idemgate worker` write to stdout and stderr is a
// JSON object, from the listening announcement to the error they exit
// with.
func TestJSONLogsOnly(t *testing.T) {
	t.Parallel()
	t.Run("serve", func(t *testing.T) {
		t.Parallel()
		up := newUpstream(t)
		g := startProcess(t, "serve", "--config", writeConfig(t, "memory", "", "", up.srv.URL, ""))
		public, admin := g.listening(t, "public"), g.listening(t, "admin")
		send(t, public, req{path: "/v1/payments", key: "json-" + randomID()})
		send(t, public, req{path: "/v1/payments"}) // a 400 problem
		send(t, public, req{path: "/v1/dead", key: "dead-" + randomID()})
		if s := getStatus(t, admin+"/metrics", ""); s != http.StatusUnauthorized {
			t.Fatalf("admin /metrics without the token: %d", s)
		}
		g.stop(t)
		out := allJSON(t, "stdout", g.out.String())
		if !has(out, func(m map[string]any) bool {
			return m["msg"] == "listening" && m["listener"] == "public" && m["url"] == public && m["level"] == "INFO"
		}) {
			t.Errorf("stdout lacks the listening object for %s:\n%s", public, g.out)
		}
		logs := allJSON(t, "stderr", g.errOut.String())
		if !has(logs, func(m map[string]any) bool { return m["msg"] == "request" }) {
			t.Errorf("stderr has no request log line:\n%s", tail(g.errOut.String(), 4000))
		}
	})
	t.Run("serve fails", func(t *testing.T) {
		t.Parallel()
		busy, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { busy.Close() })
		cfg := writeConfig(t, "memory", "", "", "http://127.0.0.1:1", "")
		b, _ := os.ReadFile(cfg)
		if err := os.WriteFile(cfg, []byte(strings.Replace(string(b), `listen: "127.0.0.1:0"`, `listen: "`+busy.Addr().String()+`"`, 1)), 0o600); err != nil {
			t.Fatal(err)
		}
		g := startProcess(t, "serve", "--config", cfg)
		var exit *exec.ExitError
		select {
		case err := <-g.done:
			g.done <- err
			if !errors.As(err, &exit) || exit.ExitCode() != 1 {
				t.Fatalf("serve on a busy port: %v, want exit 1", err)
			}
		case <-time.After(60 * time.Second):
			t.Fatal("serve on a busy port did not exit")
		}
		logs := allJSON(t, "stderr", g.errOut.String())
		if !has(logs, func(m map[string]any) bool {
			err, _ := m["err"].(string)
			return m["msg"] == "exiting" && m["level"] == "ERROR" && strings.Contains(err, "public listener")
		}) {
			t.Errorf("stderr lacks the error the process exits with, as JSON:\n%s", g.errOut)
		}
		allJSON(t, "stdout", g.out.String())
	})
	t.Run("worker", func(t *testing.T) {
		t.Parallel()
		dbURL, redisURL := testkit.Postgres(t, exampleTables()), testkit.RedisURL(t)
		w := startProcess(t, "worker", "--config", flowConfig(t, dbURL, redisURL, "http://127.0.0.1:1", "q"+randomID()))
		admin := w.listening(t, "worker-admin")
		if s := getStatus(t, admin+"/healthz", ""); s != http.StatusOK {
			t.Fatalf("worker /healthz: %d", s)
		}
		if s := getStatus(t, admin+"/metrics", ""); s != http.StatusUnauthorized {
			t.Fatalf("worker /metrics without the token: %d", s)
		}
		w.stop(t)
		if !has(allJSON(t, "stdout", w.out.String()), func(m map[string]any) bool {
			return m["msg"] == "listening" && m["listener"] == "worker-admin" && m["url"] == admin
		}) {
			t.Errorf("stdout lacks the listening object for %s:\n%s", admin, w.out)
		}
		allJSON(t, "stderr", w.errOut.String())
	})
}

// TestWorkerAdminListener: the worker's /metrics needs the admin token
// (inherited from admin_token_sha256), as a bearer token or a Basic
// password; /healthz stays open; worker.admin_tls serves both over HTTPS.
func TestWorkerAdminListener(t *testing.T) {
	t.Parallel()
	dbURL, redisURL := testkit.Postgres(t, exampleTables()), testkit.RedisURL(t)
	cfgPath := flowConfig(t, dbURL, redisURL, "http://127.0.0.1:1", "q"+randomID())
	ca := tlsfilestest.NewCA(t)
	certFile, keyFile := ca.Issue(t, "127.0.0.1").Write(t, t.TempDir(), "worker")
	// flowConfig ends inside the worker block.
	appendConfig(t, cfgPath, fmt.Sprintf("  admin_tls: {cert_file: %q, key_file: %q}\n", certFile, keyFile))
	p := runInProcess("worker", "--config", cfgPath)
	t.Cleanup(func() {
		if err := p.stop(); err != nil {
			t.Errorf("worker: %v", err)
		}
		if t.Failed() {
			t.Logf("worker log:\n%s", tail(p.errOut.String(), 4000))
		}
	})
	testkit.Eventually(t, "worker listening", 60*time.Second, func() bool { return addrs(p.out.String())["worker-admin"] != "" })
	admin := addrs(p.out.String())["worker-admin"]
	if !strings.HasPrefix(admin, "https://") {
		t.Fatalf("worker admin listener announced as %s, want https://", admin)
	}
	c := tlsClient(t, ca)
	get := func(path string, set func(*http.Request)) resp {
		t.Helper()
		hr, _ := http.NewRequest(http.MethodGet, admin+path, nil)
		set(hr)
		return roundTrip(t, c, hr)
	}
	none := func(*http.Request) {}
	bearer := func(tok string) func(*http.Request) {
		return func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+tok) }
	}
	if r := get("/healthz", none); r.status != http.StatusOK {
		t.Fatalf("/healthz without a token: %d, want 200 (probes need no secret)", r.status)
	}
	for name, set := range map[string]func(*http.Request){"no token": none, "a wrong token": bearer("wrong")} {
		r := get("/metrics", set)
		if r.status != http.StatusUnauthorized || r.header.Get("WWW-Authenticate") != `Bearer realm="idemgate-admin"` {
			t.Fatalf("/metrics with %s: %d, WWW-Authenticate %q", name, r.status, r.header.Get("WWW-Authenticate"))
		}
		if p := r.problem(t); p["type"] != "https://idemgate.dev/problems/unauthorized" {
			t.Fatalf("/metrics with %s: problem %v", name, p)
		}
	}
	if r := get("/metrics", bearer(adminToken)); r.status != http.StatusOK || !strings.Contains(string(r.body), "idemgate_") {
		t.Fatalf("/metrics with the token: %d", r.status)
	}
	if r := get("/metrics", func(r *http.Request) { r.SetBasicAuth("prometheus", adminToken) }); r.status != http.StatusOK ||
		!strings.Contains(string(r.body), `idemgate_admin_auth_failures_total{reason="wrong"} 1`+"\n") {
		t.Fatalf("/metrics with the token as a Basic password: %d, or the one wrong token not counted", r.status)
	}

	// Guessing: after admin.max_auth_failures (10) wrong tokens in a
	// minute, this peer is refused, its right token too.
	for i := 1; i < gateway.DefaultAdminMaxAuthFailures; i++ {
		if r := get("/metrics", bearer("wrong")); r.status != http.StatusUnauthorized {
			t.Fatalf("wrong token %d: %d, want 401", i+1, r.status)
		}
	}
	r := get("/metrics", bearer(adminToken))
	if r.status != http.StatusTooManyRequests || r.header.Get("Retry-After") == "" {
		t.Fatalf("/metrics with the token after %d wrong ones: %d Retry-After %q, want 429 with Retry-After",
			gateway.DefaultAdminMaxAuthFailures, r.status, r.header.Get("Retry-After"))
	}
	if p := r.problem(t); p["type"] != "https://idemgate.dev/problems/rate-limited" {
		t.Fatalf("/metrics of a throttled peer: problem %v", p)
	}
}
