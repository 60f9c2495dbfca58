package strictyaml

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// walk checks node n against the Go type t at key path path: unknown and
// repeated keys, and values of the wrong type, each with its line. It
// records where every key is, for the problems found later.
func (d *Document) walk(n *yaml.Node, t reflect.Type, path string) {
	if d.budget--; d.budget < 0 {
		return // the decoder still reports what is left
	}
	for n.Kind == yaml.AliasNode {
		if n = n.Alias; n == nil {
			return
		}
	}
	if isNull(n) {
		return
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	// An anchor's content is checked once, where it is written; this also
	// ends alias cycles, which the decoder reports.
	if d.visited[visit{n, t}] {
		return
	}
	d.visited[visit{n, t}] = true
	if t == reflect.TypeFor[yaml.Node]() {
		return // any YAML at all, read by whoever holds it
	}
	if t == reflect.TypeFor[time.Duration]() {
		d.duration(n, path)
		return
	}
	if reflect.PointerTo(t).Implements(reflect.TypeFor[yaml.Unmarshaler]()) {
		if err := reflect.New(t).Interface().(yaml.Unmarshaler).UnmarshalYAML(n); err != nil {
			d.fail(n.Line, path, "%s", unmarshalerText(err))
		}
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			d.fail(n.Line, path, "must be a mapping, not %s", Describe(n))
			return
		}
		fields := yamlFields(t)
		d.pairs(n, path, func(k, v *yaml.Node, child string) {
			f, ok := fields[k.Value]
			if !ok {
				d.fail(k.Line, child, "unknown key%s", suggest(k.Value, fields))
				d.Errors[len(d.Errors)-1].Unknown = true
				return
			}
			d.walk(v, f, child)
		}, func(m *yaml.Node) { d.walk(m, t, path) })
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			d.fail(n.Line, path, "must be a mapping, not %s", Describe(n))
			return
		}
		d.pairs(n, path, func(_, v *yaml.Node, child string) {
			d.walk(v, t.Elem(), child)
		}, func(m *yaml.Node) { d.walk(m, t, path) })
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			d.fail(n.Line, path, "must be a list, not %s", Describe(n))
			return
		}
		for i, item := range n.Content {
			child := fmt.Sprintf("%s[%d]", path, i)
			d.mark(item, child)
			if isNull(item) && !nillable(t.Elem()) {
				d.fail(item.Line, child, "is an empty entry")
			} else {
				d.walk(item, t.Elem(), child)
			}
			// The decoder drops an entry it cannot read, which shifts the
			// later ones: the list's indices no longer match the file, so
			// nothing under it can be trusted.
			if d.unread[child] {
				d.unread[path] = true
			}
		}
	default:
		if n.Kind != yaml.ScalarNode {
			d.fail(n.Line, path, "must be %s, not %s", kindName(t), Describe(n))
			return
		}
		if err := n.Decode(reflect.New(t).Interface()); err != nil {
			d.fail(n.Line, path, "%q is not %s", n.Value, kindName(t))
		}
	}
}

// unmarshalerText is the message of an UnmarshalYAML error without the
// line, which the problem carries.
func unmarshalerText(err error) string {
	var te *yaml.TypeError
	if errors.As(err, &te) && len(te.Errors) > 0 {
		_, msg := splitLine(te.Errors[0])
		return msg
	}
	_, msg := splitLine(strings.TrimPrefix(err.Error(), "yaml: "))
	return msg
}

// pairs visits the entries of mapping n, reporting repeated keys and
// handing YAML merge keys (<<: *anchor) to merge.
func (d *Document) pairs(n *yaml.Node, path string, each func(k, v *yaml.Node, child string), merge func(*yaml.Node)) {
	first := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
			for v.Kind == yaml.AliasNode && v.Alias != nil {
				v = v.Alias
			}
			if v.Kind == yaml.SequenceNode {
				for _, m := range v.Content {
					merge(m)
				}
			} else {
				merge(v)
			}
			continue
		}
		if k.Kind != yaml.ScalarNode {
			d.fail(k.Line, path, "a key must be a plain name, not %s", Describe(k))
			continue
		}
		child := Join(path, k.Value)
		d.mark(k, child)
		if line, dup := first[k.Value]; dup {
			d.fail(k.Line, child, "set twice (first on line %d)", line)
			// The decoder skips a mapping with a repeated key, so what
			// it holds cannot be trusted.
			d.unread[path] = true
			continue
		}
		first[k.Value] = k.Line
		each(k, v, child)
	}
}

func (d *Document) mark(n *yaml.Node, path string) {
	if _, ok := d.lines[path]; !ok {
		d.lines[path] = n.Line
	}
	d.marks[n.Line] = append(d.marks[n.Line], mark{n.Column, path})
}

func nillable(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Map, reflect.Interface:
		return true
	}
	return false
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

func kindName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Bool:
		return "true or false"
	case reflect.Float32, reflect.Float64:
		return "a number"
	}
	return "a " + t.Kind().String()
}

// yamlFields maps each yaml key of struct type t to its field's type; an
// inline struct's keys are t's own.
func yamlFields(t reflect.Type) map[string]reflect.Type {
	fields := map[string]reflect.Type{}
	for f := range t.Fields() {
		if _, opts, _ := strings.Cut(f.Tag.Get("yaml"), ","); opts == "inline" && f.Type.Kind() == reflect.Struct {
			maps.Copy(fields, yamlFields(f.Type))
			continue
		}
		if name, ok := yamlName(f); ok {
			fields[name] = f.Type
		}
	}
	return fields
}

func yamlName(f reflect.StructField) (string, bool) {
	if !f.IsExported() {
		return "", false
	}
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	if name == "-" {
		return "", false
	}
	if name == "" {
		name = strings.ToLower(f.Name)
	}
	return name, true
}

// suggest names the known key closest to a mistyped one, if one is close.
func suggest(key string, fields map[string]reflect.Type) string {
	best, bestDist := "", 3
	for _, name := range slices.Sorted(maps.Keys(fields)) {
		if d := distance(strings.ToLower(key), name); d < bestDist && d <= max(1, len(name)/3) {
			best, bestDist = name, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf("; did you mean %q?", best)
}

// distance is the Levenshtein distance between a and b, in bytes.
func distance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 64
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// duration checks a time.Duration written at path. A value written with
// white space around it is read without, for the decoder too, which would
// refuse it.
func (d *Document) duration(n *yaml.Node, path string) {
	if n.Kind != yaml.ScalarNode {
		d.fail(n.Line, path, "must be a duration such as 30s, not %s", Describe(n))
		return
	}
	s := strings.TrimSpace(n.Value)
	if _, err := time.ParseDuration(s); err != nil {
		d.fail(n.Line, path, "%q is not a duration (use %s)", n.Value, durationHint(s))
		return
	}
	if s != n.Value {
		n.Value, n.Tag, n.Style = s, "!!str", 0
		d.onLine[n.Line] = true
	}
}

func durationHint(s string) string {
	if isDecimal(s) {
		return s + "s"
	}
	if days, ok := strings.CutSuffix(s, "d"); ok {
		if n, err := strconv.Atoi(days); err == nil && n > 0 && n <= 10000 {
			return fmt.Sprintf("%dh", 24*n)
		}
	}
	return "a Go duration such as 30s, 5m or 1h30m"
}

func isDecimal(s string) bool {
	s = strings.TrimPrefix(s, "-")
	digits, dots := 0, 0
	for _, c := range s {
		switch {
		case c >= '0' && c <= '9':
			digits++
		case c == '.':
			dots++
		default:
			return false
		}
	}
	return digits > 0 && dots <= 1
}
