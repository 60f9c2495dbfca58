// Package strictyaml decodes a YAML document into a Go struct and reports
// every mistake in it at once, each with its line and key path: unknown
// keys (with the known key they were probably meant to be), keys written
// twice, values of the wrong kind. A time.Duration is a Go duration string
// ("30s"), so a struct of a library's own settings decodes as it is. It
// remembers where every key is, so that problems found later, by
// validation, can be placed on their line, and it decodes a value again
// over defaults (DecodeOver), for a block that overrides another.
//
//	doc := strictyaml.Decode(data, &cfg)
//	for _, e := range doc.Errors {
//		fmt.Println(e) // LINE: KEY: MESSAGE
//	}
//	line := doc.Line("routes[1].idempotency.lease")
//	route := defaults // a block of the same type written elsewhere
//	written := doc.DecodeOver("routes[1].idempotency", &route)
//
// A key path joins mapping keys with "." and list entries with "[i]";
// Join quotes a key that is not a plain name.
package strictyaml

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Error is one mistake found while reading a document, at its line.
type Error struct {
	// Line is 1-based; 0 when unknown.
	Line int
	// Key is the key path, like routes[1].idempotency.lease; "" when the
	// mistake is with the document as a whole.
	Key string
	// Message says what is wrong, in one line.
	Message string
	// Unknown says the mistake is a key v's type does not have, for a
	// caller that lets a program claim keys of its own.
	Unknown bool
}

// Error formats e as LINE: KEY: MESSAGE, leaving out the parts that are
// unknown.
func (e Error) Error() string {
	s := e.Message
	if e.Key != "" {
		s = e.Key + ": " + s
	}
	if e.Line > 0 {
		s = strconv.Itoa(e.Line) + ": " + s
	}
	return s
}

// Document is what Decode learned of a document.
type Document struct {
	// Errors are the mistakes found, in the order found.
	Errors []Error

	usable  bool
	unread  map[string]bool // key paths with a problem, or that the decoder left out
	lines   map[string]int  // key path → line
	marks   map[int][]mark  // line → the keys and list items that start on it
	onLine  map[int]bool    // lines the walk has read for the decoder: a problem, a duration
	visited map[visit]bool  // nodes walked, each once even when aliased
	budget  int             // nodes left to walk
	root    *yaml.Node      // the document's top mapping
}

type visit struct {
	n *yaml.Node
	t reflect.Type
}

type mark struct {
	col  int
	path string
}

// maxNodes bounds the walk, aliases included, so that a small document
// cannot make it walk forever.
const maxNodes = 100_000

// Decode reads the single YAML document in data into v, a pointer to a
// struct, refusing keys that v's type does not have. Keys are matched
// with the yaml tags of the struct fields, an embedded struct tagged
// ",inline" adding its keys to its parent's; a field of type yaml.Node
// takes any value unchecked, a time.Duration takes a Go duration string
// (surrounding white space ignored; a bare number is refused rather than
// guessed at: "30" could mean seconds or nanoseconds), and a type that
// implements yaml.Unmarshaler is checked by its own UnmarshalYAML. An
// empty document leaves v as it is.
// examples are keys the document is meant to hold, named in the problem
// when it is not a mapping.
func Decode(data []byte, v any, examples ...string) *Document {
	d := &Document{
		unread:  map[string]bool{},
		lines:   map[string]int{},
		marks:   map[int][]mark{},
		onLine:  map[int]bool{},
		visited: map[visit]bool{},
		budget:  maxNodes,
	}
	d.usable = d.decode(data, v, examples) && !d.unread[""]
	return d
}

// Usable reports whether v holds the document: false after a syntax
// error, a second document, a document that is not a mapping, or a key
// written twice at the top level (the decoder then reads nothing).
func (d *Document) Usable() bool { return d.usable }

// Unread reports whether key, or a key that holds it, had a problem or was
// left out by the decoder: what v holds there is not what the document
// says, so further problems with it would only mislead.
func (d *Document) Unread(key string) bool {
	for k := key; k != ""; k = Parent(k) {
		if d.unread[k] {
			return true
		}
	}
	return false
}

// Line returns the line of key, or of the nearest key that holds it; 0
// when neither is written.
func (d *Document) Line(key string) int {
	for k := key; k != ""; k = Parent(k) {
		if line, ok := d.lines[k]; ok {
			return line
		}
	}
	return 0
}

// KeyAt returns the key path of the last key or list item starting on
// line at or before column col (the first one when col is 0). A value on a
// line of its own belongs to the last key above it.
func (d *Document) KeyAt(line, col int) string {
	key := ""
	for _, m := range d.marks[line] {
		if key == "" || (col > 0 && m.col <= col) {
			key = m.path
		}
	}
	for l := line - 1; key == "" && l > 0; l-- {
		if ms := d.marks[l]; len(ms) > 0 {
			key = ms[len(ms)-1].path
		}
	}
	return key
}

// Written reports whether key itself is written in the document.
func (d *Document) Written(key string) bool {
	_, ok := d.lines[key]
	return ok
}

// Scalar returns the value written at key when it is a scalar (a string,
// a number: its text), and the line it is on; ok is false when key is not
// written, or holds a mapping or a list.
func (d *Document) Scalar(key string) (value string, line int, ok bool) {
	if d.root == nil {
		return "", 0, false
	}
	n := valueAt(d.root, key, maxDepth)
	if n == nil || n.Kind != yaml.ScalarNode {
		return "", 0, false
	}
	return n.Value, n.Line, true
}

// Parent drops the last element of a key path: a.b[2].c → a.b[2] → a.b.
func Parent(key string) string {
	if i := strings.LastIndexAny(key, ".["); i >= 0 {
		return key[:i]
	}
	return ""
}

// Join appends key to path, quoting a key that is not a plain name
// (letters, digits, '_', '.', ':' and '-') so a path stays on one line and
// unambiguous.
func Join(path, key string) string {
	if !plain(key) {
		key = strconv.Quote(key)
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

func plain(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("_.:-", c) >= 0 {
			continue
		}
		return false
	}
	return true
}

// Describe names a node in a message: "a mapping", "a list", "an alias"
// or its quoted value.
func Describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return strconv.Quote(n.Value)
	}
	return "an alias"
}

// ErrorText is the message of an error of the yaml package, on one line
// and without its "yaml: " prefix.
func ErrorText(err error) string { return oneLine(strings.TrimPrefix(err.Error(), "yaml: ")) }

func (d *Document) fail(line int, key, format string, args ...any) {
	d.Errors = append(d.Errors, Error{Line: line, Key: key, Message: fmt.Sprintf(format, args...)})
	d.onLine[line] = true
	if key != "" {
		d.unread[key] = true
	}
}

// decode parses the YAML into v. It reports false when there is no
// usable document (a syntax error, or not a mapping).
func (d *Document) decode(data []byte, v any, examples []string) bool {
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			return true // an empty document: v as it is
		}
		d.yamlError(err)
		return false
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			d.yamlError(err)
		} else {
			d.fail(extra.Line, "", "a second YAML document; the file must hold exactly one")
		}
		return false
	}
	doc := &root
	if doc.Kind == yaml.DocumentNode {
		if len(doc.Content) == 0 {
			return true
		}
		doc = doc.Content[0]
	}
	if isNull(doc) {
		return true
	}
	if doc.Kind != yaml.MappingNode {
		keys := ""
		if len(examples) > 0 {
			keys = " (" + strings.Join(examples, ", ") + ", ...)"
		}
		d.fail(doc.Line, "", "the file must be a mapping of keys%s, not %s", keys, Describe(doc))
		return false
	}
	d.root = doc
	t := reflect.TypeOf(v).Elem()
	d.walk(doc, t, "")

	// The walk above names the key path of every unknown key and bad
	// value; this decoder refuses unknown keys on its own too, also past
	// the walk's budget. Its reports are kept only for lines the walk
	// found nothing on.
	dec = yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	err := dec.Decode(reflect.New(t).Interface())
	var te *yaml.TypeError
	switch {
	case err == nil:
	case errors.As(err, &te):
		for _, msg := range te.Errors {
			d.decoderError(msg)
		}
	default:
		d.decoderError(strings.TrimPrefix(err.Error(), "yaml: "))
	}
	// v is filled from the nodes the walk read, each duration as it read
	// it; what this cannot decode was reported above.
	_ = root.Decode(v)
	return true
}

// DecodeOver decodes the value written at key over v, a pointer to the
// type walked there: v keeps every setting the value leaves out or writes
// as null, and takes those it writes. It returns the key paths, relative
// to key, of the settings written (a nested key as "fingerprint.headers",
// its parent "fingerprint" too), merge keys' included. A value that had a
// problem, or one under a key that had one, is not decoded: what the
// document says there is unknown.
func (d *Document) DecodeOver(key string, v any) map[string]bool {
	if d.root == nil || d.Unread(key) {
		return nil
	}
	n := valueAt(d.root, key, maxDepth)
	if n == nil {
		return nil
	}
	n = withoutNulls(n, maxDepth)
	_ = n.Decode(v) // its mistakes were reported by Decode
	var written map[string]any
	_ = n.Decode(&written)
	keys := map[string]bool{}
	writtenKeys(keys, "", written)
	return keys
}

// maxDepth bounds the functions below, which follow aliases: a cycle of
// them was reported by Decode.
const maxDepth = 64

// resolve follows aliases to the node they name.
func resolve(n *yaml.Node, depth int) (*yaml.Node, int) {
	for n.Kind == yaml.AliasNode && n.Alias != nil && depth > 0 {
		n, depth = n.Alias, depth-1
	}
	return n, depth
}

func isMergeKey(k *yaml.Node) bool { return k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" }

// valueAt returns the node written at key below n, nil when none is, as
// the decoder reads it: a key written in a mapping before one a merge key
// brings, an earlier merge key's before a later one's.
func valueAt(n *yaml.Node, key string, depth int) *yaml.Node {
	n, depth = resolve(n, depth)
	if key == "" || depth <= 0 {
		return n
	}
	switch n.Kind {
	case yaml.SequenceNode:
		num, rest, ok := strings.Cut(strings.TrimPrefix(key, "["), "]")
		i, err := strconv.Atoi(num)
		if !ok || err != nil || key[0] != '[' || i < 0 || i >= len(n.Content) {
			return nil
		}
		return valueAt(n.Content[i], rest, depth-1)
	case yaml.MappingNode:
		key = strings.TrimPrefix(key, ".")
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if isMergeKey(k) || k.Kind != yaml.ScalarNode {
				continue
			}
			name := Join("", k.Value)
			if rest, ok := strings.CutPrefix(key, name); ok && (rest == "" || rest[0] == '.' || rest[0] == '[') {
				return valueAt(n.Content[i+1], rest, depth-1)
			}
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			if !isMergeKey(n.Content[i]) {
				continue
			}
			merged, md := resolve(n.Content[i+1], depth-1)
			sources := []*yaml.Node{merged}
			if merged.Kind == yaml.SequenceNode {
				sources = merged.Content
			}
			for _, m := range sources {
				if v := valueAt(m, key, md-1); v != nil {
					return v
				}
			}
		}
	}
	return nil
}

// withoutNulls is n without the mapping entries whose value is null, at
// every depth, aliases and merge keys followed: decoded over a value, it
// leaves what a null would have cleared.
func withoutNulls(n *yaml.Node, depth int) *yaml.Node {
	n, depth = resolve(n, depth)
	if n.Kind != yaml.MappingNode || depth <= 0 {
		return n
	}
	c := *n
	c.Content = nil
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		r, _ := resolve(v, depth)
		switch {
		case isNull(r):
			continue
		case isMergeKey(k) && r.Kind == yaml.SequenceNode:
			list := *r
			list.Content = nil
			for _, m := range r.Content {
				list.Content = append(list.Content, withoutNulls(m, depth-1))
			}
			v = &list
		case r.Kind == yaml.MappingNode:
			v = withoutNulls(r, depth-1)
		}
		c.Content = append(c.Content, k, v)
	}
	return &c
}

// writtenKeys adds to keys the path of every entry of m, nested mappings
// included, under prefix.
func writtenKeys(keys map[string]bool, prefix string, m map[string]any) {
	for k, v := range m {
		path := Join(prefix, k)
		keys[path] = true
		if sub, ok := v.(map[string]any); ok {
			writtenKeys(keys, path, sub)
		}
	}
}

func (d *Document) yamlError(err error) {
	var te *yaml.TypeError
	if errors.As(err, &te) {
		for _, msg := range te.Errors {
			d.decoderError(msg)
		}
		return
	}
	line, msg := splitLine(strings.TrimPrefix(err.Error(), "yaml: "))
	d.fail(line, "", "%s", msg)
}

func (d *Document) decoderError(msg string) {
	line, msg := splitLine(msg)
	if line > 0 && d.onLine[line] {
		return
	}
	d.fail(line, d.KeyAt(line, 0), "%s", msg)
}

// splitLine takes the "line N: " prefix off a yaml message.
func splitLine(msg string) (int, string) {
	rest, ok := strings.CutPrefix(msg, "line ")
	if !ok {
		return 0, oneLine(msg)
	}
	num, text, ok := strings.Cut(rest, ": ")
	n, err := strconv.Atoi(num)
	if !ok || err != nil {
		return 0, oneLine(msg)
	}
	return n, oneLine(text)
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
