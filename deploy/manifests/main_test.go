package manifests

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// idemgateBin is the idemgate binary the tests run: IDEMGATE_BIN, or one
// TestMain builds from the repository; examplesBin is idemgate with the
// example jobs (IDEMGATE_EXAMPLES_BIN, or built likewise), which the
// compose demo runs. They are set once, before any test.
var idemgateBin, examplesBin string

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	idemgateBin, examplesBin = os.Getenv("IDEMGATE_BIN"), os.Getenv("IDEMGATE_EXAMPLES_BIN")
	if idemgateBin == "" || examplesBin == "" {
		dir, err := os.MkdirTemp("", "idemgate-manifests-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		for _, b := range []struct {
			bin *string
			pkg string
		}{{&idemgateBin, "./cmd/idemgate"}, {&examplesBin, "./examples/cmd/idemgate-examples"}} {
			if *b.bin != "" {
				continue
			}
			*b.bin = filepath.Join(dir, filepath.Base(b.pkg))
			build := exec.Command("go", "build", "-o", *b.bin, b.pkg)
			build.Dir = repoRoot()
			build.Stdout, build.Stderr = os.Stderr, os.Stderr
			if err := build.Run(); err != nil {
				fmt.Fprintln(os.Stderr, "building", b.pkg+":", err)
				return 1
			}
		}
	}
	return m.Run()
}

// repoRoot is the idemgate repository: this module lives in deploy/manifests.
func repoRoot() string {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		panic(err)
	}
	return root
}

// repoPath is a path of the repository, given with slashes.
func repoPath(rel string) string { return filepath.Join(repoRoot(), filepath.FromSlash(rel)) }

func readRepoFile(t *testing.T, rel string) []byte {
	t.Helper()
	data, err := os.ReadFile(repoPath(rel))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// decodeStrict decodes YAML into v as the API server would decode it
// strictly: duplicate keys, unknown fields and fields in the wrong case
// are errors.
func decodeStrict(data []byte, v any) error {
	j, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return err
	}
	strict, err := sigsjson.UnmarshalStrict(j, v, sigsjson.DisallowDuplicateFields, sigsjson.DisallowUnknownFields)
	if err != nil {
		return err
	}
	if len(strict) > 0 {
		msgs := make([]string, len(strict))
		for i, e := range strict {
			msgs[i] = e.Error()
		}
		return fmt.Errorf("%s", strings.Join(msgs, "; "))
	}
	return nil
}

// configCheck runs `bin config check` on the file with exactly the
// environment env (nothing inherited: DATABASE_URL and REDIS_URL in the
// test's own environment would override the file).
func configCheck(t *testing.T, bin, file string, env map[string]string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "config", "check", "--config", file)
	cmd.Env = []string{}
	for _, k := range slices.Sorted(maps.Keys(env)) {
		cmd.Env = append(cmd.Env, k+"="+env[k])
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Errorf("idemgate config check --config %s: %v\n%s%s", file, err, stdout.String(), stderr.String())
		return
	}
	if !strings.Contains(stdout.String(), ": ok (") {
		t.Errorf("idemgate config check --config %s printed %q, want a line ending in ok (…)", file, stdout.String())
	}
}

// gatewayConfig is the part of an idemgate configuration the deployment
// files must agree with: where it listens and how long it takes to stop.
// The defaults are those of package config.
type gatewayConfig struct {
	Listen      *string `json:"listen"`
	AdminListen *string `json:"admin_listen"`
	Server      struct {
		ShutdownTimeout string `json:"shutdown_timeout"`
		DrainDelay      string `json:"drain_delay"`
	} `json:"server"`
	Worker struct {
		AdminListen     *string `json:"admin_listen"`
		ShutdownTimeout string  `json:"shutdown_timeout"`
		LockTTL         string  `json:"lock_ttl"`
	} `json:"worker"`
}

// listeners and timeouts of a parsed configuration, defaults filled.
type configFacts struct {
	listen, adminListen, workerAdminListen string
	shutdownTimeout, drainDelay            time.Duration
	workerShutdownTimeout, workerLockTTL   time.Duration
}

func parseConfig(t *testing.T, data []byte) configFacts {
	t.Helper()
	var c gatewayConfig
	if err := yaml.Unmarshal(data, &c); err != nil {
		t.Fatalf("configuration: %v", err)
	}
	or := func(p *string, def string) string {
		if p == nil {
			return def
		}
		return *p
	}
	dur := func(s, def string) time.Duration {
		if s == "" {
			s = def
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("configuration: duration %q: %v", s, err)
		}
		return d
	}
	return configFacts{
		listen:                or(c.Listen, ":8080"),
		adminListen:           or(c.AdminListen, "127.0.0.1:9090"),
		workerAdminListen:     or(c.Worker.AdminListen, "127.0.0.1:9091"),
		shutdownTimeout:       dur(c.Server.ShutdownTimeout, "30s"),
		drainDelay:            dur(c.Server.DrainDelay, "0s"),
		workerShutdownTimeout: dur(c.Worker.ShutdownTimeout, "25s"),
		workerLockTTL:         dur(c.Worker.LockTTL, "30s"),
	}
}

// containerPort is the port of a listen address that a container must
// serve on every interface: a probe or a scrape comes from outside the
// container, so a loopback address would never answer it.
func containerPort(t *testing.T, key, addr string) int {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("%s %q: %v", key, addr, err)
	}
	if host != "" && host != "0.0.0.0" && host != "::" {
		t.Errorf("%s %q listens on %s only: in a container it must listen on every interface (\":%s\")", key, addr, host, port)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n <= 0 {
		t.Fatalf("%s %q: no fixed port", key, addr)
	}
	return n
}
