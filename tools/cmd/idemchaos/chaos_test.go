package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/idemgate/idemgate/internal/e2e/chaos"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// pgx closes its pools in the background.
		goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	)
}

// shortScenarios is the subset make test runs: a PostgreSQL restart under
// proxied load, the broker losing a backlog of accepted jobs, and a
// gateway killed mid-request.
const shortScenarios = "pg-restart-fast,broker-wipe,gateway-sigkill"

// TestFaultSuiteShort runs a short version of the fault suite against a
// freshly built idemgate and fails when a guarantee breaks. It needs
// redis-server and the PostgreSQL server binaries (initdb, pg_ctl,
// postgres), and starts its own servers.
func TestFaultSuiteShort(t *testing.T) {
	if testing.Short() {
		t.Skip("the fault suite starts private Redis and PostgreSQL servers and idemgate processes")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the test builds idemgate and needs go on PATH: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "idemgate")
	build := exec.CommandContext(t.Context(), gobin, "build", "-o", bin, "./examples/cmd/idemgate-examples")
	build.Dir = "../../.." // the main module builds it with its own go.mod
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build idemgate: %v\n%s", err, out)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 150*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	err = run(ctx, []string{"-short", "-json", "-scenario", shortScenarios, "-idemgate", bin}, &stdout, &stderr)
	var rep chaos.Report
	if jerr := json.Unmarshal(stdout.Bytes(), &rep); jerr != nil {
		t.Fatalf("the fault suite did not run: %v\n%s", err, stderr.String())
	}
	var table strings.Builder
	_ = rep.WriteTable(&table)
	t.Logf("fault suite:\n%s", table.String())
	switch {
	case errors.Is(err, errBroken):
		t.Fatalf("a guarantee is broken (RELIABILITY.md lists them):\n%s", table.String())
	case err != nil:
		t.Fatalf("the fault suite did not complete: %v\n%s", err, stderr.String())
	}
	if len(rep.Rows) != 3 {
		t.Errorf("%d scenarios ran, want 3 (%s)", len(rep.Rows), shortScenarios)
	}
	for _, r := range rep.Rows {
		if r.HistoryViolations == nil {
			t.Errorf("%s: its history was not checked", r.Scenario)
		}
	}
}

func TestUsage(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown scenario", []string{"-scenario", "pg-restart-fast,disk-full"}, `unknown scenario "disk-full"`},
		{"unknown flag", []string{"-chaos-monkey"}, "flag provided but not defined"},
		{"argument", []string{"pg-restart-fast"}, "unexpected arguments"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := run(t.Context(), tt.args, &stdout, &stderr)
			var usage usageError
			if !errors.As(err, &usage) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("run(%q) = %v, want a usage error with %q", tt.args, err, tt.want)
			}
		})
	}
}

// TestMissingBinary: a wrong -idemgate is said plainly, before any server
// starts.
func TestMissingBinary(t *testing.T) {
	var stdout, stderr bytes.Buffer
	err := run(t.Context(), []string{"-idemgate", filepath.Join(t.TempDir(), "nope")}, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "not an executable file") {
		t.Fatalf("run = %v, want the binary named as missing", err)
	}
}
