package docstest

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// root is the repository's root, two levels above this package.
const root = "../.."

// TestEveryShellBlockIsMarked: a command a page prints is run by
// TestRunnableBlocks or marked as not runnable, with a reason.
func TestEveryShellBlockIsMarked(t *testing.T) {
	blocks, err := Blocks(root)
	if err != nil {
		t.Fatal(err)
	}
	runnable := 0
	for _, b := range blocks {
		if b.Runnable {
			runnable++
		}
	}
	if runnable == 0 {
		t.Fatalf("no runnable block among %d shell blocks: the markers are not found", len(blocks))
	}
}

// TestBlocksReportsUnmarkedBlocks: the check above fails on a page with a
// shell block that has no marker, and reads both markers.
func TestBlocksReportsUnmarkedBlocks(t *testing.T) {
	dir := t.TempDir()
	page := "# A page\n\n<!-- runnable -->\n```sh\necho one\n```\n\n" +
		"<!-- not runnable: needs a production host -->\n```sh\nkubectl apply -k .\n```\n\n" +
		"```console\n$ echo transcript\n```\n\n" +
		"```bash\necho forgotten\n```\n"
	if err := os.WriteFile(filepath.Join(dir, "README.md"), []byte(page), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "docs"), 0o700); err != nil {
		t.Fatal(err)
	}
	blocks, err := Blocks(dir)
	if err == nil || !strings.Contains(err.Error(), "README.md:17: a bash block without") {
		t.Fatalf("Blocks' error = %v, want README.md:17's bash block reported", err)
	}
	if len(blocks) != 3 || !blocks[0].Runnable || blocks[0].Script != "echo one\n" ||
		blocks[1].Runnable || blocks[1].Reason != "needs a production host" {
		t.Fatalf("blocks = %+v", blocks)
	}
}

// TestNavListsEveryPage: mkdocs --strict fails on a nav entry without its
// page, but only mentions a page that no nav entry leads to; this fails on
// both.
func TestNavListsEveryPage(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(root, "mkdocs.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Nav []any `yaml:"nav"`
	}
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	inNav := map[string]bool{}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case string:
			inNav[v] = true
		case []any:
			for _, e := range v {
				walk(e)
			}
		case map[string]any:
			for _, e := range v {
				walk(e)
			}
		}
	}
	walk(cfg.Nav)
	pages, err := Pages(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pages {
		if p == "README.md" {
			continue
		}
		rel := strings.TrimPrefix(p, "docs/")
		if !inNav[rel] {
			t.Errorf("%s is in no nav entry of mkdocs.yml", p)
		}
		delete(inNav, rel)
	}
	for p := range inNav {
		t.Errorf("mkdocs.yml's nav names %s, which docs/ does not have", p)
	}
}

// TestRootLinksResolve: the pages outside the site (README.md,
// BENCHMARKS.md, CONTRIBUTING.md) link into it by relative paths that
// mkdocs does not check; each must name a file of the repository.
func TestRootLinksResolve(t *testing.T) {
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	for _, page := range []string{"README.md", "BENCHMARKS.md", "CONTRIBUTING.md"} {
		raw, err := os.ReadFile(filepath.Join(root, page))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(raw), -1) {
			target, _, _ := strings.Cut(m[1], "#")
			if target == "" || strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			if _, err := os.Stat(filepath.Join(root, target)); err != nil {
				t.Errorf("%s links to %s, which does not exist", page, m[1])
			}
		}
	}
}
