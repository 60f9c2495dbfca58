package reference

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
)

// module is the module path; a package's directory is its path below it,
// under the module's root.
const module = "github.com/idemgate/idemgate"

// source reads the Go files of the module's packages (tests left out) on
// demand, each package once.
type source struct {
	root string
	fset *token.FileSet
	pkgs map[string][]*ast.File
}

func newSource(root string) *source {
	return &source{root: root, fset: token.NewFileSet(), pkgs: map[string][]*ast.File{}}
}

// files returns the parsed non-test files of the package with import
// path pkg, comments kept.
func (s *source) files(pkg string) ([]*ast.File, error) {
	if fs, ok := s.pkgs[pkg]; ok {
		return fs, nil
	}
	rel, ok := strings.CutPrefix(pkg, module)
	if !ok {
		return nil, fmt.Errorf("%s is not a package of %s", pkg, module)
	}
	dir := filepath.Join(s.root, filepath.FromSlash(strings.TrimPrefix(rel, "/")))
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var fs []*ast.File
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(s.fset, filepath.Join(dir, name), nil, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		fs = append(fs, f)
	}
	s.pkgs[pkg] = fs
	return fs, nil
}

// fieldDocs returns the doc comments of the fields of the struct type
// typ in package pkg, by field name. A field without a comment of its own
// shares the one above it (MaxWaiters and MaxWaitersPerTenant, written
// one under the other, share one comment).
func (s *source) fieldDocs(pkg, typ string) (map[string]string, error) {
	fs, err := s.files(pkg)
	if err != nil {
		return nil, err
	}
	for _, f := range fs {
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.TYPE {
				continue
			}
			for _, sp := range g.Specs {
				ts := sp.(*ast.TypeSpec)
				st, ok := ts.Type.(*ast.StructType)
				if ts.Name.Name != typ || !ok {
					continue
				}
				docs := map[string]string{}
				last := ""
				for _, fl := range st.Fields.List {
					text := fl.Doc.Text()
					if text == "" {
						text = last
					}
					last = text
					for _, n := range fl.Names {
						docs[n.Name] = text
					}
					if len(fl.Names) == 0 { // embedded
						docs[embeddedName(fl.Type)] = text
					}
				}
				return docs, nil
			}
		}
	}
	return nil, fmt.Errorf("no struct type %s in %s", typ, pkg)
}

func embeddedName(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.StarExpr:
		return embeddedName(t.X)
	case *ast.SelectorExpr:
		return t.Sel.Name
	case *ast.Ident:
		return t.Name
	}
	return ""
}

// prose escapes what Markdown would read as markup in text that is not
// code: HTML's angle brackets and emphasis's asterisk.
var prose = strings.NewReplacer("<", "&lt;", ">", "&gt;", "*", `\*`)

// markdown turns a doc comment's text into Markdown paragraphs: lines
// joined, indented blocks kept as code, markup escaped outside code.
func markdown(text string) string {
	var out []string
	var para, code []string
	flush := func() {
		if len(para) > 0 {
			p := strings.Join(para, " ")
			p = prose.Replace(p)
			out = append(out, p)
			para = nil
		}
		if len(code) > 0 {
			out = append(out, "```\n"+strings.Join(code, "\n")+"\n```")
			code = nil
		}
	}
	for _, line := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		switch {
		case strings.TrimSpace(line) == "":
			flush()
		case strings.HasPrefix(line, "\t") || strings.HasPrefix(line, "  "):
			if len(para) > 0 {
				flush()
			}
			code = append(code, strings.TrimPrefix(line, "\t"))
		default:
			if len(code) > 0 {
				flush()
			}
			para = append(para, strings.TrimSpace(line))
		}
	}
	flush()
	return strings.Join(out, "\n\n")
}
