package strictyaml

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// seconds checks itself: Decode must report its message at the value's
// key and line.
type seconds time.Duration

func (s *seconds) UnmarshalYAML(n *yaml.Node) error {
	d, err := time.ParseDuration(n.Value)
	if n.Kind != yaml.ScalarNode || err != nil {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %q is not a duration", n.Line, n.Value)}}
	}
	*s = seconds(d)
	return nil
}

type server struct {
	owner    `yaml:",inline"`
	Name     string         `yaml:"name"`
	Port     int            `yaml:"port"`
	Timeout  seconds        `yaml:"timeout"`
	Tags     []string       `yaml:"tags"`
	Limits   map[string]int `yaml:"limits"`
	Backends []backend      `yaml:"backends"`
	Extra    yaml.Node      `yaml:"extra"`
	Internal string         `yaml:"-"`
	Grace    time.Duration  `yaml:"grace"`
}

// owner is embedded inline: its keys are server's.
type owner struct {
	Owner string `yaml:"owner"`
}

type backend struct {
	URL    string `yaml:"url"`
	Weight *int   `yaml:"weight"`
}

// lines formats the problems as LINE: KEY: MESSAGE.
func lines(d *Document) []string {
	var out []string
	for _, p := range d.Errors {
		out = append(out, fmt.Sprintf("%d: %s: %s", p.Line, p.Key, p.Message))
	}
	return out
}

func TestDecodeErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, yaml string
		want       []string
		usable     bool
	}{
		{
			name:   "a valid document",
			yaml:   "name: a\nport: 80\ntimeout: 2s\ntags: [x]\nlimits: {a: 1}\nbackends: [{url: u, weight: 2}]\nextra: {anything: [goes]}\n",
			usable: true,
		},
		{
			name:   "an unknown key, with the known key it was meant to be",
			yaml:   "name: a\nprt: 80\n",
			want:   []string{`2: prt: unknown key; did you mean "port"?`},
			usable: true,
		},
		{
			name:   "nothing close, in a list entry",
			yaml:   "backends:\n  - url: u\n    colour: red\n",
			want:   []string{"3: backends[0].colour: unknown key"},
			usable: true,
		},
		{
			name:   "a field tagged - is not a key",
			yaml:   "internal: x\n",
			want:   []string{"1: internal: unknown key"},
			usable: true,
		},
		{
			name:   "values of the wrong kind",
			yaml:   "port: eighty\ntags: x\nlimits: [1]\nname: {a: b}\nbackends: [{url: u, weight: heavy}]\n",
			want:   []string{`1: port: "eighty" is not an integer`, `2: tags: must be a list, not "x"`, "3: limits: must be a mapping, not a list", "4: name: must be a string, not a mapping", `5: backends[0].weight: "heavy" is not an integer`},
			usable: true,
		},
		{
			name:   "a type's own UnmarshalYAML",
			yaml:   "timeout: soon\n",
			want:   []string{`1: timeout: "soon" is not a duration`},
			usable: true,
		},
		{
			name:   "a time.Duration, with a hint",
			yaml:   "grace: 30\nbackends: [{url: u}]\n",
			want:   []string{`1: grace: "30" is not a duration (use 30s)`},
			usable: true,
		},
		{
			name:   "days are not a Go duration",
			yaml:   "grace: 2d\n",
			want:   []string{`1: grace: "2d" is not a duration (use 48h)`},
			usable: true,
		},
		{
			name:   "a time.Duration is a scalar",
			yaml:   "grace: [1s]\n",
			want:   []string{"1: grace: must be a duration such as 30s, not a list"},
			usable: true,
		},
		{
			name:   "an inline struct's keys are its parent's",
			yaml:   "owner: a\nownr: b\n",
			want:   []string{`2: ownr: unknown key; did you mean "owner"?`},
			usable: true,
		},
		{
			name:   "a key written twice",
			yaml:   "name: a\nname: b\n",
			want:   []string{"2: name: set twice (first on line 1)"},
			usable: false, // the decoder reads nothing of such a mapping
		},
		{
			name:   "an empty list entry",
			yaml:   "backends:\n  -\n  - url: u\n",
			want:   []string{"2: backends[0]: is an empty entry"},
			usable: true,
		},
		{
			name:   "a key that is not a plain name is quoted",
			yaml:   "limits: {a b: 1}\nport: [1]\n\"x y\": 1\n",
			want:   []string{"2: port: must be an integer, not a list", `3: "x y": unknown key`},
			usable: true,
		},
		{
			name:   "merge keys are checked against the block they merge into",
			yaml:   "b: &b {url: u, colour: red}\nbackends:\n  - <<: *b\n",
			want:   []string{"1: b: unknown key", "1: backends[0].colour: unknown key"},
			usable: true,
		},
		{
			name:   "an alias is checked where its anchor is written",
			yaml:   "backends:\n  - &b {url: u, size: 1}\n  - *b\n",
			want:   []string{"2: backends[0].size: unknown key"},
			usable: true,
		},
		{
			name: "not a mapping",
			yaml: "- a\n",
			want: []string{"1: : the file must be a mapping of keys (name, port, ...), not a list"},
		},
		{
			name: "a syntax error",
			yaml: "name: [\n",
			want: []string{"1: : did not find expected node content"},
		},
		{
			name: "two documents",
			yaml: "name: a\n---\nname: b\n",
			want: []string{"2: : a second YAML document; the file must hold exactly one"},
		},
		{name: "an empty document", yaml: "", usable: true},
		{name: "a null document", yaml: "~\n", usable: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var s server
			d := Decode([]byte(tc.yaml), &s, "name", "port")
			if got := lines(d); !slices.Equal(got, tc.want) {
				t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
			if d.Usable() != tc.usable {
				t.Errorf("Usable() = %v, want %v", d.Usable(), tc.usable)
			}
		})
	}
}

func TestDecodeFills(t *testing.T) {
	t.Parallel()
	var s server
	d := Decode([]byte("name: a\nport: 80\ntimeout: 2s\nbackends: [{url: u}]\nextra: {k: v}\nowner: o\ngrace: \" 1m \"\n"), &s)
	if len(d.Errors) != 0 || !d.Usable() {
		t.Fatalf("problems %v, usable %v", d.Errors, d.Usable())
	}
	if s.Name != "a" || s.Port != 80 || s.Timeout != seconds(2*time.Second) || len(s.Backends) != 1 || s.Backends[0].URL != "u" || s.Extra.Kind != yaml.MappingNode ||
		s.Owner != "o" || s.Grace != time.Minute {
		t.Errorf("decoded %+v", s)
	}
}

// block is a set of settings that items override.
type block struct {
	Grace time.Duration `yaml:"grace"`
	Tags  []string      `yaml:"tags"`
	Inner struct {
		A []string `yaml:"a"`
		B int      `yaml:"b"`
	} `yaml:"inner"`
}

func TestDecodeOver(t *testing.T) {
	t.Parallel()
	var doc struct {
		Base  block `yaml:"base"`
		Items []struct {
			Over block `yaml:"over"`
		} `yaml:"items"`
	}
	d := Decode([]byte(`base: &b {grace: 1s, tags: [x], inner: {a: [p], b: 2}}
items:
  - over: {grace: 5s, tags: ~, inner: {b: 0}}
  - over: {<<: *b, grace: 3s}
  - over: ~
  - over: {grace: " 4s "}
  - over: {grace: 30, tags: [y]}
  - over: 7
  - {<<: {over: {tags: [m]}}}
  - over: *b
`), &doc)
	if got, want := lines(d), []string{`7: items[4].over.grace: "30" is not a duration (use 30s)`, `8: items[5].over: must be a mapping, not "7"`}; !slices.Equal(got, want) {
		t.Fatalf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for i, tc := range []struct {
		grace   time.Duration
		tags    []string
		a       []string
		b       int
		written []string
	}{
		{5 * time.Second, []string{"x"}, []string{"p"}, 0, []string{"grace", "inner", "inner.b"}},
		{3 * time.Second, []string{"x"}, []string{"p"}, 2, []string{"grace", "inner", "inner.a", "inner.b", "tags"}},
		{time.Second, []string{"x"}, []string{"p"}, 2, nil},
		{4 * time.Second, []string{"x"}, []string{"p"}, 2, []string{"grace"}},
		{time.Second, []string{"y"}, []string{"p"}, 2, []string{"grace", "tags"}}, // the bad grace is not read
		{time.Second, []string{"x"}, []string{"p"}, 2, nil},
		{time.Second, []string{"m"}, []string{"p"}, 2, []string{"tags"}},
		{time.Second, []string{"x"}, []string{"p"}, 2, []string{"grace", "inner", "inner.a", "inner.b", "tags"}},
	} {
		got := doc.Base
		written := d.DecodeOver(fmt.Sprintf("items[%d].over", i), &got)
		if got.Grace != tc.grace || !slices.Equal(got.Tags, tc.tags) || !slices.Equal(got.Inner.A, tc.a) || got.Inner.B != tc.b {
			t.Errorf("items[%d]: decoded %+v", i, got)
		}
		if keys := slices.Sorted(maps.Keys(written)); !slices.Equal(keys, tc.written) {
			t.Errorf("items[%d]: written %q, want %q", i, keys, tc.written)
		}
	}
	if doc.Base.Grace != time.Second || !slices.Equal(doc.Base.Tags, []string{"x"}) {
		t.Errorf("the base changed: %+v", doc.Base)
	}
}

func TestWhereKeysAre(t *testing.T) {
	t.Parallel()
	data := "name: a\nbackends:\n  - url: u\n    weight: -1\n  - {url: v, weight: x}\n  - oops\nlimits:\n  a b: 1\ntags:\n  - ${X}\n"
	var s server
	d := Decode([]byte(data), &s)
	for _, tc := range []struct {
		key  string
		line int
	}{
		{"name", 1},
		{"backends[0].weight", 4},
		{"backends[1]", 5},
		{"backends[1].url", 5},
		{`limits."a b"`, 8},
		{"backends[0].missing", 3}, // the nearest key that holds it
		{"port", 0},
	} {
		if got := d.Line(tc.key); got != tc.line {
			t.Errorf("Line(%q) = %d, want %d", tc.key, got, tc.line)
		}
	}
	for _, tc := range []struct {
		line, col int
		want      string
	}{
		{5, 0, "backends[1]"},
		{5, 20, "backends[1].weight"},
		{5, 6, "backends[1].url"},
		{10, 0, "tags[0]"},
		{11, 0, "tags[0]"}, // past the end: the last key above
	} {
		if got := d.KeyAt(tc.line, tc.col); got != tc.want {
			t.Errorf("KeyAt(%d, %d) = %q, want %q", tc.line, tc.col, got, tc.want)
		}
	}
	// backends[2] is not a mapping: the decoder drops it, so the list no
	// longer matches the file.
	for key, want := range map[string]bool{"backends[1].weight": true, "backends[1].url": true, "backends[2]": true, "backends": true, "name": false, "limits": false} {
		if got := d.Unread(key); got != want {
			t.Errorf("Unread(%q) = %v, want %v", key, got, want)
		}
	}
}

func TestKeyPaths(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ path, key, want string }{
		{"", "listen", "listen"},
		{"worker.queues", "critical", "worker.queues.critical"},
		{"worker.queues", "bulk:low-1.a_b", "worker.queues.bulk:low-1.a_b"},
		{"worker", "con currency", `worker."con currency"`},
		{"headers", "", `headers.""`},
	} {
		if got := Join(tc.path, tc.key); got != tc.want {
			t.Errorf("Join(%q, %q) = %q, want %q", tc.path, tc.key, got, tc.want)
		}
	}
	for key, want := range map[string]string{"a.b[2].c": "a.b[2]", "a.b[2]": "a.b", "a.b": "a", "a": ""} {
		if got := Parent(key); got != want {
			t.Errorf("Parent(%q) = %q, want %q", key, got, want)
		}
	}
}

func TestSuggest(t *testing.T) {
	t.Parallel()
	fields := yamlFields(reflect.TypeFor[server]())
	for key, want := range map[string]string{
		"prt":      `; did you mean "port"?`,
		"Name":     `; did you mean "name"?`,
		"backend":  `; did you mean "backends"?`,
		"timeouts": `; did you mean "timeout"?`,
		"zzz":      "",
		"po":       "", // too far from a short name
	} {
		if got := suggest(key, fields); got != want {
			t.Errorf("suggest(%q) = %q, want %q", key, got, want)
		}
	}
}

// An alias cycle and an alias bomb end: each node is walked once, and the
// walk stops after its budget.
func TestAliasesEnd(t *testing.T) {
	t.Parallel()
	var bomb strings.Builder
	bomb.WriteString("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i < 9; i++ {
		fmt.Fprintf(&bomb, "a%d: &a%d [*a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d]\n", i, i, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1)
	}
	for _, data := range []string{"tags: &t [*t]\n", bomb.String()} {
		var s server
		d := Decode([]byte(data), &s)
		if len(d.Errors) == 0 {
			t.Errorf("%.40q: no problem reported", data)
		}
	}
}
