package importrules

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/gateway"
	"github.com/idemgate/idemgate/gateway/gatewaytest"
	"github.com/idemgate/idemgate/middleware/idempotency/memstore"
)

var update = flag.Bool("update", false, "write the imports table of ARCHITECTURE.md")

// architecture is ARCHITECTURE.md, at the module's root.
const architecture = "../../ARCHITECTURE.md"

func readArchitecture(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(architecture)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// section returns the text of the "## title" section of doc, up to the
// next heading of that level.
func section(t *testing.T, doc, title string) string {
	t.Helper()
	_, rest, ok := strings.Cut(doc, "\n## "+title+"\n")
	if !ok {
		t.Fatalf("ARCHITECTURE.md has no section %q", title)
	}
	body, _, _ := strings.Cut(rest, "\n## ")
	return body
}

// tableRows returns the cells of the Markdown table rows in text, header
// and rule left out.
func tableRows(text string) [][]string {
	var rows [][]string
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, "|") || strings.HasPrefix(line, "|---") {
			continue
		}
		line = strings.ReplaceAll(strings.Trim(line, "|"), `\|`, "\x00")
		var cells []string
		for _, c := range strings.Split(line, "|") {
			cells = append(cells, strings.TrimSpace(strings.ReplaceAll(c, "\x00", "|")))
		}
		rows = append(rows, cells)
	}
	if len(rows) > 0 {
		rows = rows[1:] // the header
	}
	return rows
}

// everyPackage runs `go list` with format over every package of the
// main module and of the tools module.
func everyPackage(t *testing.T, format string) []string {
	t.Helper()
	return append(list(t, format, "..."), listIn(t, tools, format, "tools/...")...)
}

// packages is every package of the main and tools modules as
// ARCHITECTURE.md names it: its path below the main module, "idemgate" for
// the root.
func packages(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, p := range everyPackage(t, "{{.ImportPath}}") {
		out = append(out, short(p))
	}
	slices.Sort(out)
	return out
}

func short(p string) string {
	if p == module {
		return "idemgate"
	}
	return strings.TrimPrefix(p, module+"/")
}

// Every package of the module has its one line in Packages, and every
// line names a package that exists.
func TestArchitecturePackages(t *testing.T) {
	t.Parallel()
	var named []string
	for _, row := range tableRows(section(t, readArchitecture(t), "Packages")) {
		named = append(named, strings.Trim(row[0], "`"))
	}
	want := packages(t)
	for _, p := range want {
		if !slices.Contains(named, p) {
			t.Errorf("package %s has no line in ARCHITECTURE.md's Packages", p)
		}
	}
	for _, p := range named {
		if !slices.Contains(want, p) {
			t.Errorf("ARCHITECTURE.md's Packages names %s, which is not a package", p)
		}
	}
}

// importsTable is the Imports table: each package of the module with the
// module's packages its non-test files import.
func importsTable(t *testing.T) string {
	t.Helper()
	lines := everyPackage(t, `{{.ImportPath}}{{range .Imports}},{{.}}{{end}}`)
	var b strings.Builder
	b.WriteString("| package | imports (of idemgate) |\n|---|---|\n")
	var rows [][]string
	for _, line := range lines {
		fields := strings.Split(line, ",")
		var deps []string
		for _, d := range fields[1:] {
			if d == module || strings.HasPrefix(d, module+"/") {
				deps = append(deps, short(d))
			}
		}
		slices.Sort(deps)
		imports := "—"
		if len(deps) > 0 {
			imports = "`" + strings.Join(deps, "`, `") + "`"
		}
		rows = append(rows, []string{short(fields[0]), imports})
	}
	slices.SortFunc(rows, func(a, b []string) int { return strings.Compare(a[0], b[0]) })
	for _, r := range rows {
		fmt.Fprintf(&b, "| `%s` | %s |\n", r[0], r[1])
	}
	return b.String()
}

const (
	importsBegin = "<!-- imports: written by go test ./internal/importrules -run TestArchitectureImports -update -->\n"
	importsEnd   = "<!-- end of imports -->\n"
)

// The Imports table is the import graph as go list reports it; -update
// writes it.
func TestArchitectureImports(t *testing.T) {
	doc := readArchitecture(t)
	before, rest, ok := strings.Cut(doc, importsBegin)
	_, after, ok2 := strings.Cut(rest, importsEnd)
	if !ok || !ok2 {
		t.Fatalf("ARCHITECTURE.md lacks the markers of the imports table:\n%s%s", importsBegin, importsEnd)
	}
	want := before + importsBegin + importsTable(t) + importsEnd + after
	if *update {
		if err := os.WriteFile(architecture, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if doc != want {
		t.Fatal("ARCHITECTURE.md's imports table is stale: run go test ./internal/importrules -run TestArchitectureImports -update")
	}
}

// endpoint is "METHOD /path" as the Endpoints table writes it.
var endpoint = regexp.MustCompile("`([A-Z]+|\\*) (/[^`]*)`")

// The Endpoints table's gateway rows are the endpoints the gateway
// registers on each listener, both ways; the configured routes are the
// configuration's.
func TestArchitectureEndpoints(t *testing.T) {
	t.Parallel()
	srv := gatewaytest.Start(t, gatewaytest.Options(gatewaytest.NewQueue(), memstore.New()))
	served := map[string][]string{}
	for listener, eps := range map[string][]gateway.Endpoint{"public": srv.Gateway.PublicRoutes(), "admin": srv.Gateway.AdminRoutes()} {
		for _, ep := range eps {
			if ep.Kind == gateway.KindAPI || ep.Kind == gateway.KindTool {
				served[listener] = append(served[listener], ep.Method+" "+ep.Path)
			}
		}
	}
	written := map[string][]string{}
	for _, row := range tableRows(section(t, readArchitecture(t), "Endpoints")) {
		listener := row[0]
		if _, ok := served[listener]; !ok {
			continue // the worker's, a receiver's, mounted by internal/cli
		}
		for _, m := range endpoint.FindAllStringSubmatch(row[1], -1) {
			written[listener] = append(written[listener], m[1]+" "+m[2])
		}
	}
	for listener, eps := range served {
		for _, ep := range eps {
			if !slices.Contains(written[listener], ep) {
				t.Errorf("the gateway serves %s on its %s listener; ARCHITECTURE.md's Endpoints does not list it", ep, listener)
			}
		}
		for _, ep := range written[listener] {
			if !slices.Contains(eps, ep) {
				t.Errorf("ARCHITECTURE.md's Endpoints lists %s on the %s listener; the gateway does not serve it", ep, listener)
			}
		}
	}
}

// declared is every name the module's non-test files declare: packages
// (their last path element), functions, types, variables, constants,
// "Type.Method" and "Type.Field", each also as "pkg.Name".
func declared(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	add := func(pkg string, n ...string) {
		name := strings.Join(n, ".")
		names[name] = true
		names[pkg+"."+name] = true
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		pkg := filepath.Base(filepath.Dir(p))
		names[pkg] = true
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					add(pkg, d.Name.Name)
					continue
				}
				add(pkg, receiver(d.Recv.List[0].Type), d.Name.Name)
				names[d.Name.Name] = true
			case *ast.GenDecl:
				for _, sp := range d.Specs {
					switch s := sp.(type) {
					case *ast.TypeSpec:
						add(pkg, s.Name.Name)
						if st, ok := s.Type.(*ast.StructType); ok {
							for _, fl := range st.Fields.List {
								for _, n := range fl.Names {
									add(pkg, s.Name.Name, n.Name)
								}
							}
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							add(pkg, n.Name)
						}
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return names
}

func receiver(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.StarExpr:
		return receiver(x.X)
	case *ast.IndexExpr:
		return receiver(x.X)
	case *ast.IndexListExpr:
		return receiver(x.X)
	case *ast.Ident:
		return x.Name
	}
	return ""
}

// goName is a backticked Go name: Name, Type.Method, pkg.Type.Method,
// with an optional (); a token with a path, a hyphen or an underscore
// (a file, a header, a key) is not one.
var goName = regexp.MustCompile("`([A-Za-z][A-Za-z0-9]*(?:\\.[A-Za-z][A-Za-z0-9]*)*)(?:\\(\\))?`")

// Every Go name the request chain, the job's path, the endpoints and the
// names table give exists in the code, so that a rename that leaves one
// behind fails.
func TestArchitectureNamesExist(t *testing.T) {
	t.Parallel()
	names := declared(t)
	doc := readArchitecture(t)
	for _, title := range []string{"Endpoints", "One request", "One job", "Names"} {
		for _, m := range goName.FindAllStringSubmatch(section(t, doc, title), -1) {
			if !names[m[1]] {
				t.Errorf("ARCHITECTURE.md's %s names `%s`, which the code does not declare", title, m[1])
			}
		}
	}
}
