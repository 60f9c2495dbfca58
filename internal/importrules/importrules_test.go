package importrules

import (
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/idemgate/idemgate"

// tools is the directory of the tools module (tools/go.mod): the
// benchmark, the fault suite's command and the browser tests.
const tools = "../../tools"

// list runs `go list` with format over the packages (paths below the
// module) and returns its lines.
func list(t *testing.T, format string, pkgs ...string) []string {
	t.Helper()
	return listIn(t, "", format, pkgs...)
}

// listIn is list run in dir, the main module's when dir is empty.
func listIn(t *testing.T, dir, format string, pkgs ...string) []string {
	t.Helper()
	args := []string{"list", "-f", format}
	for _, p := range pkgs {
		args = append(args, module+"/"+p)
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("go list %s: %v\n%s", strings.Join(pkgs, " "), err, ee.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	return strings.Fields(string(out))
}

// deps is every package the packages need, themselves included, the
// standard library left out.
func deps(t *testing.T, pkgs ...string) []string {
	t.Helper()
	return list(t, `{{range .Deps}}{{.}} {{end}}{{.ImportPath}}`, pkgs...)
}

// nonStandard drops the standard library's packages (no dot in the first
// path element).
func nonStandard(paths []string) []string {
	return slices.DeleteFunc(slices.Clone(paths), func(p string) bool {
		first, _, _ := strings.Cut(p, "/")
		return !strings.Contains(first, ".")
	})
}

// matching returns the paths below the module that match re, each once.
func matching(paths []string, re *regexp.Regexp) []string {
	var out []string
	for _, p := range paths {
		rel, ok := strings.CutPrefix(p, module+"/")
		if ok && re.MatchString(rel) && !slices.Contains(out, rel) {
			out = append(out, rel)
		}
	}
	return out
}

// The idempotency middleware needs the standard library, the I-JSON leaf
// and the error carrier (both standard library only), so a service takes
// nothing else with it.
func TestIdempotencyMiddlewareNeedsTheStandardLibraryOnly(t *testing.T) {
	t.Parallel()
	got := nonStandard(deps(t, "middleware/idempotency"))
	if want := []string{module + "/ijson", module + "/problem", module + "/middleware/idempotency"}; !slices.Equal(got, want) {
		t.Fatalf("middleware/idempotency needs %v, want the standard library, ijson and problem only", got)
	}
}

// The error carrier imports only the standard library, so every library
// that reports through it stays as light as it was.
func TestProblemNeedsTheStandardLibraryOnly(t *testing.T) {
	t.Parallel()
	if got := nonStandard(deps(t, "problem")); !slices.Equal(got, []string{module + "/problem"}) {
		t.Fatalf("problem needs %v, want the standard library only", got)
	}
}

// Only code about idempotency imports the idempotency middleware: a
// package that reports an error uses problem. The job package, the rate
// limiter and the error carrier itself report errors and need nothing of
// the middleware.
func TestReportingAnErrorNeedsNoIdempotency(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"problem", "job", "middleware/ratelimit"} {
		if got := matching(deps(t, p), regexp.MustCompile(`^middleware/idempotency$`)); len(got) > 0 {
			t.Errorf("%s imports middleware/idempotency", p)
		}
	}
}

// The libraries a user imports reach nothing of the product; client
// reaches openapi's YAML converter, a leaf, through openapi.
func TestLibrariesImportNoProductPackage(t *testing.T) {
	t.Parallel()
	product := regexp.MustCompile(`^(gateway|telemetry|cmd|config|examples|migrations|internal)(/|$)`)
	got := slices.DeleteFunc(matching(deps(t, "middleware/...", "workers/...", "job", "receiver", "client", "extension", "reconcile", "ijson", "lincheck"), product),
		func(p string) bool { return p == "internal/yamljson" })
	if len(got) > 0 {
		t.Fatalf("the libraries import product packages: %v", got)
	}
}

// The worker framework uses the OpenTelemetry API only: no SDK, exporter,
// gRPC or Prometheus comes with it into a program that imports it.
func TestWorkersNeedNoExporter(t *testing.T) {
	t.Parallel()
	var got []string
	for _, p := range deps(t, "workers/...") {
		if strings.HasPrefix(p, "go.opentelemetry.io/otel/sdk") || strings.HasPrefix(p, "go.opentelemetry.io/otel/exporters") ||
			strings.HasPrefix(p, "google.golang.org/grpc") || strings.HasPrefix(p, "github.com/prometheus/") {
			got = append(got, p)
		}
	}
	if len(got) > 0 {
		t.Fatalf("workers needs %v", got)
	}
}

func TestOpenAPIImportsNothingOfTheProduct(t *testing.T) {
	t.Parallel()
	got := matching(deps(t, "openapi"), regexp.MustCompile(`.`))
	got = slices.DeleteFunc(got, func(p string) bool { return p == "openapi" || p == "internal/yamljson" })
	if len(got) > 0 {
		t.Fatalf("openapi imports %v", got)
	}
}

// The examples are written as a user would write them: public packages
// only.
func TestExamplesImportPublicPackagesOnly(t *testing.T) {
	t.Parallel()
	public := regexp.MustCompile(`^(middleware|workers|job|receiver|client|extension|reconcile|ijson|examples)(/|$)`)
	var got []string
	for _, p := range matching(list(t, `{{join .Imports " "}}`, "examples/..."), regexp.MustCompile(`.`)) {
		if !public.MatchString(p) {
			got = append(got, p)
		}
	}
	if len(got) > 0 {
		t.Fatalf("examples import %v", got)
	}
}

// The product binary holds nothing of the examples: no handler, no table,
// no check. idemgate-examples adds them through package extension.
func TestProductBinaryHoldsNoExample(t *testing.T) {
	t.Parallel()
	if got := matching(deps(t, "cmd/idemgate"), regexp.MustCompile(`^examples(/|$)`)); len(got) > 0 {
		t.Fatalf("cmd/idemgate imports %v", got)
	}
}

func TestGatewayNeverReadsTheConfiguration(t *testing.T) {
	t.Parallel()
	if got := matching(deps(t, "gateway"), regexp.MustCompile(`^(config|cmd|examples)(/|$)`)); len(got) > 0 {
		t.Fatalf("gateway imports %v", got)
	}
}

// A program that imports idemgate's libraries gets none of the modules
// only the tools module needs: its go.mod lists them, the main one does not.
func TestToolDependenciesStayInTheToolsModule(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-m", "all").Output()
	if err != nil {
		t.Fatalf("go list -m all: %v", err)
	}
	heavy := regexp.MustCompile(`^(github\.com/tsenart/vegeta|gonum\.org/v1/plot|github\.com/chromedp/|github\.com/riverqueue/|github\.com/golangci/)`)
	var got []string
	for _, line := range strings.Split(string(out), "\n") {
		if heavy.MatchString(line) {
			got = append(got, line)
		}
	}
	if len(got) > 0 {
		t.Fatalf("the main module requires %v; only tools/go.mod may", got)
	}
}

// testsOfExamples are the packages whose tests may import the examples,
// with why.
var testsOfExamples = map[string]string{
	"internal/cli": "whole-system tests drive the examples build",
	"internal/e2e": "whole-system tests drive the examples build",
}

// A product package's tests use their own testdata, never the examples,
// so that changing an example breaks no product test. The whole-system
// tests are the exception (testsOfExamples); the tools module's are
// outside this module.
func TestProductTestsImportNoExample(t *testing.T) {
	t.Parallel()
	example := regexp.MustCompile(`^examples(/|$)`)
	lines := list(t, `{{.ImportPath}}|{{join .TestImports ","}},{{join .XTestImports ","}}`, "...")
	if len(lines) < 50 {
		t.Fatalf("go list found %d packages: the pattern misses the module", len(lines))
	}
	var got []string
	for _, line := range lines {
		pkg, imports, _ := strings.Cut(line, "|")
		rel := strings.TrimPrefix(pkg, module+"/")
		if pkg == module {
			rel = "."
		}
		if example.MatchString(rel) || testsOfExamples[rel] != "" {
			continue
		}
		if bad := matching(strings.Split(imports, ","), example); len(bad) > 0 {
			got = append(got, rel+" → "+strings.Join(bad, " "))
		}
	}
	if len(got) > 0 {
		t.Fatalf("product tests import the examples (give them testdata of their own):\n%s", strings.Join(got, "\n"))
	}
}
