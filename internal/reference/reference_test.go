package reference

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "write the reference pages under docs/reference")

// root is the module's directory: this package is internal/reference.
const root = "../.."

// check compares the page at docs/reference/name with want, or writes it
// with -update.
func check(t *testing.T, name string, want []byte, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(root, "docs", "reference", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v; write it with go test ./internal/reference -run TestReference -update", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("docs/reference/%s is stale: run go test ./internal/reference -run TestReference -update", name)
	}
}

func TestReferenceConfiguration(t *testing.T) {
	b, err := Configuration(root)
	check(t, "configuration.md", b, err)
}

func TestReferenceProblems(t *testing.T) {
	check(t, "problems.md", Problems(), nil)
}

func TestReferenceMetrics(t *testing.T) {
	b, err := Metrics(root)
	check(t, "metrics.md", b, err)
}

func TestReferenceCLI(t *testing.T) {
	b, err := CLI(t.Context())
	check(t, "cli.md", b, err)
}

// TestReferenceProblemPages: every problem type's URI, problem_base +
// slug, has a page under docs/problems/ on the site, and no page is left
// for a slug the table no longer has.
func TestReferenceProblemPages(t *testing.T) {
	pages := ProblemPages()
	dir := filepath.Join(root, "docs", "problems")
	if *update {
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
	}
	for name, want := range pages {
		path := filepath.Join(root, "docs", name)
		if *update {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, want, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("docs/%s is missing or stale: run go test ./internal/reference -run TestReference -update", name)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if _, ok := pages["problems/"+e.Name()+"/index.html"]; !ok {
			t.Errorf("docs/problems/%s is no problem type's page: run go test ./internal/reference -run TestReference -update", e.Name())
		}
	}
}
