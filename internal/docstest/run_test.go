package docstest

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/internal/testkit/proc"
	"github.com/idemgate/idemgate/migrations"
)

// The demo's configuration and the addresses the pages print for it, as
// `make run` starts it (deploy/local/run.sh).
const (
	demoConfig = "deploy/local/idemgate.yaml"
	demoSecret = "whsec_aWRlbWdhdGUtZGVtby1zaGlwbWVudHMtc2VjcmV0ISE="
)

var demoAddrs = []string{"127.0.0.1:8080", "127.0.0.1:9090", "127.0.0.1:9091", "127.0.0.1:9100", "127.0.0.1:9200"}

// demo is the demo stack on free ports: what a block's text is rewritten to.
type demo struct {
	rewrite *strings.Replacer
	env     []string
}

// TestRunnableBlocks runs every block marked runnable, in the order of the
// pages, each in a bash of its own against one demo stack: it must exit 0.
func TestRunnableBlocks(t *testing.T) {
	blocks, err := Blocks(root)
	if err != nil {
		t.Fatal(err)
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("bash is not installed")
	}
	// deploy/local/services.sh installs psql and redis-server; curl is the
	// reader's, and .ci/run installs it.
	for _, tool := range []string{"curl", "psql", "redis-server"} {
		if _, err := exec.LookPath(tool); err != nil {
			if tool != "curl" && os.Getenv("TEST_TOPOLOGY") != "" {
				t.Fatalf("%s is not installed, though TEST_TOPOLOGY says make test installed what the tests need", tool)
			}
			t.Skipf("%s is not installed: the runnable blocks need it (deploy/local/services.sh installs it)", tool)
		}
	}
	d := startDemo(t)
	for _, b := range blocks {
		if !b.Runnable {
			continue
		}
		t.Run(b.Name(), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			script := d.rewrite.Replace(b.Script)
			cmd := exec.CommandContext(ctx, bash, "-e", "-o", "pipefail", "-c", script)
			cmd.Dir = root
			cmd.Env = d.env
			cmd.WaitDelay = 5 * time.Second
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%s: %v\n--- the block, as run:\n%s--- its output:\n%s", b.Name(), err, script, out)
			}
			t.Logf("%s", out)
		})
	}
}

// startDemo starts what `make run` starts, on free ports: idemgate-examples
// dev with deploy/local/idemgate.yaml and the shipments receiver, on a
// database and a Redis of the test's own; it stops them when the test ends.
func startDemo(t *testing.T) *demo {
	t.Helper()
	dbURL := testkit.Database(t, exampleTables())
	redisURL := "redis://" + testkit.RedisServer(t).Addr() + "/0"
	dir := t.TempDir()
	bin := binaries(t, dir)

	ports := make([]string, len(demoAddrs))
	var pairs []string
	for i, addr := range demoAddrs {
		p, err := proc.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = "127.0.0.1:" + strconv.Itoa(p)
		pairs = append(pairs, addr, ports[i])
	}
	public, workerAdmin, receiverAddr := ports[0], ports[2], ports[4]

	raw, err := os.ReadFile(filepath.Join(root, demoConfig))
	if err != nil {
		t.Fatal(err)
	}
	schemas, err := filepath.Abs(filepath.Join(root, "examples", "schemas"))
	if err != nil {
		t.Fatal(err)
	}
	config := strings.NewReplacer(append(pairs, "../../examples/schemas", schemas)...).Replace(string(raw))
	configPath := filepath.Join(dir, "idemgate.yaml")
	if err := os.WriteFile(configPath, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}

	// run.sh gives the receiver and the gateway the demo's webhook secret.
	env := append(proc.ChildEnv(), "DATABASE_URL="+dbURL, "REDIS_URL="+redisURL, "SHIP_WEBHOOK_SECRET="+demoSecret)
	start(t, dir, "shipments-receiver", bin.receiver, []string{"--listen", receiverAddr}, env, "http://"+receiverAddr+"/healthz")
	start(t, dir, "idemgate-examples dev", bin.examples, []string{"dev", "--config", configPath}, env,
		"http://"+public+"/readyz", "http://"+workerAdmin+"/healthz")

	rewrite := append(pairs, demoConfig, configPath, "./bin/idemgate-examples", bin.examples)
	return &demo{rewrite: strings.NewReplacer(rewrite...), env: env}
}

// exampleTables are the demo's own migrations, as idemgate-examples
// applies them: examples/migrations in the version table
// idemgate_examples_version. The test reads them from the tree, since the
// demo it runs is the binary built from there.
func exampleTables() migrations.Set {
	return migrations.Set{FS: os.DirFS(filepath.Join(root, "examples", "migrations")), Table: "idemgate_examples_version"}
}

type demoBinaries struct{ examples, receiver string }

// binaries are IDEMGATE_EXAMPLES_BIN and SHIPMENTS_RECEIVER_BIN when set
// (make test builds them into bin/), else built into dir: after the first
// build the go command's cache makes it a link.
func binaries(t *testing.T, dir string) demoBinaries {
	t.Helper()
	build := func(env, name, pkg string) string {
		if p := os.Getenv(env); p != "" {
			return p
		}
		gobin, err := exec.LookPath("go")
		if err != nil {
			t.Skipf("neither %s nor go on PATH to build %s", env, name)
		}
		out := filepath.Join(dir, name)
		cmd := exec.CommandContext(t.Context(), gobin, "build", "-o", out, pkg)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, b)
		}
		return out
	}
	return demoBinaries{
		examples: build("IDEMGATE_EXAMPLES_BIN", "idemgate-examples", "github.com/idemgate/idemgate/examples/cmd/idemgate-examples"),
		receiver: build("SHIPMENTS_RECEIVER_BIN", "shipments-receiver", "github.com/idemgate/idemgate/examples/shipments/cmd/shipments-receiver"),
	}
}

// start runs one process of the demo until the test ends, and waits until
// each of its health addresses answers 200.
func start(t *testing.T, dir, name, path string, args, env []string, health ...string) {
	t.Helper()
	logPath := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".log")
	log, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	p, err := proc.Start(proc.Spec{Name: name, Path: path, Args: args, Env: env, Dir: root, Log: log})
	_ = log.Close() // the child holds its own descriptor
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Stop(syscall.SIGTERM, 10*time.Second)
		if t.Failed() {
			out, _ := os.ReadFile(logPath)
			t.Logf("%s log (last 3000 bytes):\n%s", name, tail(string(out), 3000))
		}
	})
	client := &http.Client{Timeout: time.Second}
	defer client.CloseIdleConnections()
	for _, url := range health {
		err := proc.WaitUntil(t.Context(), 2*time.Minute, name+" up", p, func(ctx context.Context) error {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			resp, err := client.Do(req)
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s: %s", url, resp.Status)
			}
			return nil
		})
		if err != nil {
			out, _ := os.ReadFile(logPath)
			t.Fatalf("%v\n%s log:\n%s", err, name, tail(string(out), 3000))
		}
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
