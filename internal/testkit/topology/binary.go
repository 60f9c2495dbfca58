package topology

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Binary returns the path of the program name, looked up on PATH and then in
// /usr/sbin (where Debian puts nginx and pgbouncer). When it is missing the
// test fails if TEST_TOPOLOGY is set, because `make test` promised it, and
// is skipped otherwise.
func Binary(t testing.TB, name string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	if p := "/usr/sbin/" + name; isExecutable(p) {
		return p
	}
	if os.Getenv("TEST_TOPOLOGY") != "" {
		t.Fatalf("topology: %s is not installed, though TEST_TOPOLOGY is set (deploy/local/services.sh --topology installs it)", name)
	}
	t.Skipf("topology: %s is not installed: skipping (make test installs it and sets TEST_TOPOLOGY=1)", name)
	return ""
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// BuildIdemgate builds cmd/idemgate into the test's directory and returns
// the binary's path. The go command's build cache makes every build after
// the first a link.
func BuildIdemgate(t testing.TB) string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("topology: the test builds idemgate and needs go on PATH: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "idemgate")
	build := exec.CommandContext(t.Context(), gobin, "build", "-o", bin, "github.com/idemgate/idemgate/cmd/idemgate")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("topology: go build idemgate: %v\n%s", err, out)
	}
	return bin
}
