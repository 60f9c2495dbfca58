package main

import (
	"context"
	"encoding/json"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// childEnv makes the test binary run idemgate itself (with the JSON list of
// arguments it holds), so a test can kill a real gateway process.
const childEnv = "IDEMGATE_TEST_CHILD_ARGS"

func TestMain(m *testing.M) {
	if args := os.Getenv(childEnv); args != "" {
		var argv []string
		if err := json.Unmarshal([]byte(args), &argv); err != nil {
			os.Exit(2)
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err := run(ctx, argv, os.Getenv, os.Stdout, os.Stderr)
		stop()
		os.Exit(exitCode(err, os.Stderr))
	}
	goleak.VerifyTestMain(m,
		// pgx and go-redis close their pools in the background.
		goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	)
}

// addrs extracts the listeners' URLs from the lines announcing them:
// "idemgate: NAME listening on URL" (log.format text) or
// {"msg":"listening","listener":NAME,"url":URL,…} (json).
func addrs(out string) map[string]string {
	found := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "{") {
			var l struct{ Msg, Listener, URL string }
			if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "listening" && l.Listener != "" {
				found[l.Listener] = l.URL
			}
			continue
		}
		name, rest, ok := strings.Cut(strings.TrimPrefix(line, "idemgate: "), " listening on ")
		if ok {
			found[name] = strings.TrimSpace(rest)
		}
	}
	return found
}

func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
