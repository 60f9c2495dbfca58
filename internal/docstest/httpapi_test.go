package docstest

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

var update = flag.Bool("update", false, "rewrite the generated part of docs/reference/http-api.md")

const (
	httpAPIPage  = "docs/reference/http-api.md"
	generatedTop = "<!-- generated from openapi/openapi.yaml by `go test ./internal/docstest -run TestHTTPAPIPage -update`: do not edit below -->"
)

// TestHTTPAPIPage: the operations and schemas of the HTTP API page are the
// served OpenAPI document's, rendered as tables; -update rewrites them.
func TestHTTPAPIPage(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(root, "openapi", "openapi.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := renderHTTPAPI(doc)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(root, httpAPIPage)
	page, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	head, _, found := strings.Cut(string(page), generatedTop)
	if !found {
		t.Fatalf("%s has no line %q", httpAPIPage, generatedTop)
	}
	next := head + generatedTop + "\n\n" + want
	if *update {
		if err := os.WriteFile(path, []byte(next), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if next != string(page) {
		t.Errorf("%s is stale against openapi/openapi.yaml: go test ./internal/docstest -run TestHTTPAPIPage -update", httpAPIPage)
	}
}

type operation struct {
	Summary     string           `yaml:"summary"`
	Description string           `yaml:"description"`
	Security    []map[string]any `yaml:"security"`
	Parameters  []parameter      `yaml:"parameters"`
	Responses   map[string]ref   `yaml:"responses"`
}

type parameter struct {
	Ref         string `yaml:"$ref"`
	Name        string `yaml:"name"`
	In          string `yaml:"in"`
	Required    bool   `yaml:"required"`
	Description string `yaml:"description"`
}

type ref struct {
	Ref         string `yaml:"$ref"`
	Description string `yaml:"description"`
}

type schema struct {
	Ref         string         `yaml:"$ref"`
	Type        any            `yaml:"type"`
	Description string         `yaml:"description"`
	Enum        []any          `yaml:"enum"`
	Required    []string       `yaml:"required"`
	Properties  yaml.Node      `yaml:"properties"`
	Items       *schema        `yaml:"items"`
	AnyOf       []schema       `yaml:"anyOf"`
	OneOf       []schema       `yaml:"oneOf"`
	Extra       map[string]any `yaml:",inline"`
}

// renderHTTPAPI renders the operations, in the document's order, and the
// component schemas as Markdown.
func renderHTTPAPI(doc []byte) (string, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(doc, &root); err != nil {
		return "", err
	}
	var d struct {
		Paths      yaml.Node `yaml:"paths"`
		Components struct {
			Parameters map[string]parameter `yaml:"parameters"`
			Responses  map[string]ref       `yaml:"responses"`
			Schemas    yaml.Node            `yaml:"schemas"`
		} `yaml:"components"`
	}
	if err := root.Decode(&d); err != nil {
		return "", err
	}
	var b bytes.Buffer
	b.WriteString("## Operations\n\n")
	b.WriteString("| operation | what it does | credentials | answers |\n|---|---|---|---|\n")
	type op struct {
		method, path string
		operation
	}
	var ops []op
	for i := 0; i+1 < len(d.Paths.Content); i += 2 {
		path := d.Paths.Content[i].Value
		item := d.Paths.Content[i+1]
		for j := 0; j+1 < len(item.Content); j += 2 {
			method := item.Content[j].Value
			switch method {
			case "get", "put", "post", "delete", "patch", "head", "options":
			default:
				continue
			}
			var o operation
			if err := item.Content[j+1].Decode(&o); err != nil {
				return "", fmt.Errorf("%s %s: %w", method, path, err)
			}
			ops = append(ops, op{strings.ToUpper(method), path, o})
		}
	}
	for _, o := range ops {
		fmt.Fprintf(&b, "| [`%s %s`](#%s) | %s | %s | %s |\n", o.method, o.path, anchor(o.method+" "+o.path),
			cell(o.Summary), credentials(o.Security), strings.Join(statuses(o.Responses), ", "))
	}
	for _, o := range ops {
		fmt.Fprintf(&b, "\n### `%s %s` {#%s}\n\n%s\n", o.method, o.path, anchor(o.method+" "+o.path), o.Summary)
		if desc := strings.TrimSpace(o.Description); desc != "" {
			fmt.Fprintf(&b, "\n%s\n", desc)
		}
		if len(o.Parameters) > 0 {
			b.WriteString("\n| parameter | in | required | meaning |\n|---|---|---|---|\n")
			for _, p := range o.Parameters {
				if p.Ref != "" {
					p = d.Components.Parameters[strings.TrimPrefix(p.Ref, "#/components/parameters/")]
				}
				fmt.Fprintf(&b, "| `%s` | %s | %v | %s |\n", p.Name, p.In, yesNo(p.Required), cell(p.Description))
			}
		}
		b.WriteString("\n| answer | meaning |\n|---|---|\n")
		for _, code := range statuses(o.Responses) {
			r := o.Responses[code]
			desc := r.Description
			if r.Ref != "" {
				desc = d.Components.Responses[strings.TrimPrefix(r.Ref, "#/components/responses/")].Description
			}
			fmt.Fprintf(&b, "| %s | %s |\n", code, cell(desc))
		}
	}
	b.WriteString("\n## Schemas\n")
	for i := 0; i+1 < len(d.Components.Schemas.Content); i += 2 {
		name := d.Components.Schemas.Content[i].Value
		var s schema
		if err := d.Components.Schemas.Content[i+1].Decode(&s); err != nil {
			return "", fmt.Errorf("schema %s: %w", name, err)
		}
		fmt.Fprintf(&b, "\n### %s {#schema-%s}\n", name, strings.ToLower(name))
		if desc := strings.TrimSpace(s.Description); desc != "" {
			fmt.Fprintf(&b, "\n%s\n", desc)
		}
		if len(s.Enum) > 0 {
			fmt.Fprintf(&b, "\nOne of %s.\n", enum(s.Enum))
		} else if len(s.Properties.Content) == 0 {
			fmt.Fprintf(&b, "\nType: %s.\n", typeOf(s))
		}
		if len(s.Properties.Content) > 0 {
			required := map[string]bool{}
			for _, r := range s.Required {
				required[r] = true
			}
			b.WriteString("\n| field | type | required | meaning |\n|---|---|---|---|\n")
			for j := 0; j+1 < len(s.Properties.Content); j += 2 {
				var p schema
				if err := s.Properties.Content[j+1].Decode(&p); err != nil {
					return "", fmt.Errorf("schema %s: %w", name, err)
				}
				fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", s.Properties.Content[j].Value, typeOf(p), yesNo(required[s.Properties.Content[j].Value]), cell(p.Description))
			}
		}
	}
	return b.String(), nil
}

func statuses(rs map[string]ref) []string {
	codes := make([]string, 0, len(rs))
	for c := range rs {
		codes = append(codes, c)
	}
	sort.Strings(codes)
	return codes
}

func credentials(sec []map[string]any) string {
	if sec == nil {
		return "—"
	}
	var names []string
	for _, s := range sec {
		for name := range s {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

func typeOf(s schema) string {
	switch {
	case s.Ref != "":
		name := s.Ref[strings.LastIndex(s.Ref, "/")+1:]
		return fmt.Sprintf("[%s](#schema-%s)", name, strings.ToLower(name))
	case s.Items != nil:
		return "array of " + typeOf(*s.Items)
	case len(s.AnyOf) > 0 || len(s.OneOf) > 0:
		var parts []string
		for _, a := range append(s.AnyOf, s.OneOf...) {
			parts = append(parts, typeOf(a))
		}
		return strings.Join(parts, " or ")
	case len(s.Enum) > 0:
		return enum(s.Enum)
	}
	switch t := s.Type.(type) {
	case string:
		return t
	case []any:
		var parts []string
		for _, e := range t {
			parts = append(parts, fmt.Sprint(e))
		}
		return strings.Join(parts, " or ")
	}
	return "any"
}

func enum(vs []any) string {
	var parts []string
	for _, v := range vs {
		parts = append(parts, fmt.Sprintf("`%v`", v))
	}
	return strings.Join(parts, ", ")
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return ""
}

// cell makes text fit a table cell: one line, its pipes escaped.
func cell(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	return strings.ReplaceAll(s, "|", `\|`)
}

// anchor is the id of an operation's heading.
func anchor(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		case b.Len() > 0 && !strings.HasSuffix(b.String(), "-"):
			b.WriteByte('-')
		}
	}
	return strings.TrimSuffix(b.String(), "-")
}
