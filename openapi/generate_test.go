package openapi_test

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestGeneratedCodeIsCurrent runs this package's go:generate commands with
// their output sent to a temporary directory and compares the result with
// the committed files: edit openapi.yaml, then `go generate ./openapi/...`.
func TestGeneratedCodeIsCurrent(t *testing.T) {
	t.Parallel()
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH to run the generator with")
	}
	commands := generateCommands(t, "openapi.go")
	if len(commands) != 2 {
		t.Fatalf("openapi.go has %d go:generate lines, want 2 (models and client)", len(commands))
	}
	dir := t.TempDir()
	for _, args := range commands {
		i := slices.Index(args, "-o")
		if i < 0 || i+1 >= len(args) || args[0] != "go" {
			t.Fatalf("go:generate %v: want `go tool oapi-codegen … -o FILE …`", args)
		}
		committed := args[i+1]
		args = slices.Clone(args)
		args[i+1] = filepath.Join(dir, strings.ReplaceAll(committed, "/", "_"))
		cmd := exec.CommandContext(t.Context(), goCmd, args[1:]...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
		want, err := os.ReadFile(args[i+1])
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(committed)
		if err != nil {
			t.Fatalf("%v: run go generate ./openapi/...", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale: run go generate ./openapi/...", committed)
		}
	}
}

// generateCommands returns the arguments of file's go:generate lines.
func generateCommands(t *testing.T, file string) [][]string {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out [][]string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "//go:generate "); ok {
			out = append(out, strings.Fields(rest))
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
