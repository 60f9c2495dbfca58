package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"go.uber.org/goleak"

	"github.com/idemgate/idemgate"
	"github.com/idemgate/idemgate/examples"
	"github.com/idemgate/idemgate/examples/demo"
	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/migrations"
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
		os.Exit(idemgate.ExitCode(err, os.Stderr))
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

// writeFile writes text to a file name in a directory of the test's own
// and returns its path.
func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// inProcess is `idemgate ARGS` run in this process through run, its
// stdout and stderr kept apart.
type inProcess struct {
	out, errOut *testkit.SyncBuffer
	cancel      context.CancelFunc
	done        chan error
	once        sync.Once
	err         error
}

// runInProcess starts `idemgate ARGS`; the caller stops it.
func runInProcess(args ...string) *inProcess {
	ctx, cancel := context.WithCancel(context.Background())
	p := &inProcess{out: &testkit.SyncBuffer{}, errOut: &testkit.SyncBuffer{}, cancel: cancel, done: make(chan error, 1)}
	go func() {
		p.done <- run(ctx, args, func(string) string { return "" }, p.out, p.errOut)
	}()
	return p
}

// stop cancels the run and returns what it ended with; it may be called
// more than once.
func (p *inProcess) stop() error {
	p.once.Do(func() {
		p.cancel()
		p.err = <-p.done
	})
	return p.err
}

// childCommand is the test binary run as `idemgate ARGS` in a process of
// its own. The child reads its whole configuration from the file: an
// ambient DATABASE_URL, DATABASE_DIRECT_URL or REDIS_URL would point it at
// another store.
func childCommand(args ...string) *exec.Cmd {
	argv, _ := json.Marshal(args)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DATABASE_URL=") && !strings.HasPrefix(kv, "DATABASE_DIRECT_URL=") && !strings.HasPrefix(kv, "REDIS_URL=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, childEnv+"="+string(argv))
	return cmd
}

// run is the program as idemgate-examples runs it: most tests drive the
// example jobs.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	return idemgate.Run(ctx, args, getenv, stdout, stderr, demo.Options()...)
}

// cli runs one command line as the binary would and returns its exit code.
func cli(t *testing.T, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := run(context.Background(), args, func(k string) string { return env[k] }, &out, &errOut)
	code = idemgate.ExitCode(err, &errOut)
	return code, out.String(), errOut.String()
}

// exampleTables are the example jobs' migrations, which testkit applies
// after idemgate's own, as `idemgate-examples migrate up` does.
func exampleTables() migrations.Set {
	m := examples.Migrations()
	return migrations.Set{FS: m.FS, Table: m.Table}
}
