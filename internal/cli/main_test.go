package cli

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"

	"github.com/idemgate/idemgate/examples/demo"
	"github.com/idemgate/idemgate/extension"
)

// The tests here check the command line itself (parsing, usage, exit
// codes, configuration checks) with no running system; the tests that
// start a gateway or a worker live in internal/e2e.

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// run is the program as idemgate-examples runs it, so that the examples'
// configurations check.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	return Run(ctx, args, getenv, stdout, stderr, extension.Apply(demo.Options()...))
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
