package topology

import (
	"os"
	"os/exec"
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
