package openapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"

	"go.yaml.in/yaml/v3"
)

// A job's schema is a JSON Schema 2020-12 document, and an OpenAPI 3.1
// schema is JSON Schema 2020-12 too, so it is embedded keyword for
// keyword. Only what makes it a document of its own has to change: inside
// the OpenAPI document a "#/$defs/address" would be resolved against the
// OpenAPI document's root, where there is no $defs. So the root's $defs
// (and draft-07 definitions) become components of their own and every
// $ref is rewritten to the component it meant; $id, which only names
// the document, is dropped.

// component is one entry of components.schemas.
type component struct {
	name   string
	schema *yaml.Node
	at     string // its JSON pointer in the job's schema, for errors
}

// dialect2020 is the $schema of JSON Schema 2020-12, the dialect of an
// OpenAPI 3.1 document's schemas.
const dialect2020 = "https://json-schema.org/draft/2020-12/schema"

// maxSchemaDepth bounds how deeply a job's schema may nest. It is far
// beyond any real payload and keeps a hostile document from exhausting
// the stack.
const maxSchemaDepth = 100

// embedSchema returns the components describing raw: the schema itself,
// named base, first, then one per definition at its root.
func embedSchema(raw json.RawMessage, base string, names *namer) ([]component, error) {
	root, err := jsonNode(raw)
	if err != nil {
		return nil, err
	}
	if root.Kind != yaml.MappingNode {
		// A boolean schema (true, false) has nothing to rewrite.
		return []component{{name: base, schema: root}}, nil
	}
	rootID := ""
	if id := lookup(root, "$id"); id != nil {
		rootID = id.Value
	}
	anchors := map[string]string{}
	err = walkSchema(root, "", func(n *yaml.Node, ptr string) error {
		if ptr != "" && lookup(n, "$id") != nil {
			return fmt.Errorf("at %s: a nested $id (an embedded schema resource) cannot be described", pointerText(ptr))
		}
		for _, kw := range []string{"$anchor", "$dynamicAnchor"} {
			if a := lookup(n, kw); a != nil {
				anchors[a.Value] = ptr
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	// The document's dialect is 2020-12: saying so again is noise, while
	// another dialect stays declared.
	if d := lookup(root, "$schema"); d != nil && strings.TrimSuffix(d.Value, "#") == dialect2020 {
		remove(root, "$schema")
	}
	remove(root, "$id")

	out := []component{{name: base, schema: root}}
	defs := map[string]map[string]string{} // keyword, definition → component
	for _, kw := range []string{"$defs", "definitions"} {
		d := lookup(root, kw)
		if d == nil || d.Kind != yaml.MappingNode {
			continue
		}
		defs[kw] = map[string]string{}
		for i := 0; i+1 < len(d.Content); i += 2 {
			name := names.take(base + pascal(d.Content[i].Value))
			defs[kw][d.Content[i].Value] = name
			at := "/" + kw + "/" + escapePointer(d.Content[i].Value)
			out = append(out, component{name: name, schema: d.Content[i+1], at: at})
		}
		remove(root, kw)
	}

	rw := refRewriter{base: base, rootID: rootID, anchors: anchors, defs: defs}
	for _, c := range out {
		if err := walkSchema(c.schema, c.at, rw.rewrite); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// refRewriter points the $refs of one job's schema at its components.
type refRewriter struct {
	base    string
	rootID  string
	anchors map[string]string            // $anchor → JSON pointer
	defs    map[string]map[string]string // "$defs" or "definitions" → definition → component
}

func (rw refRewriter) rewrite(n *yaml.Node, ptr string) error {
	if lookup(n, "$dynamicRef") != nil {
		return fmt.Errorf("at %s: $dynamicRef cannot be described; use $ref", pointerText(ptr))
	}
	ref := lookup(n, "$ref")
	if ref == nil {
		return nil
	}
	to, err := rw.target(ref.Value)
	if err != nil {
		return fmt.Errorf("at %s: %w", pointerText(ptr), err)
	}
	ref.Value, ref.Tag, ref.Style = to, "!!str", 0
	return nil
}

// target is where ref, relative to the job's schema, points in the
// OpenAPI document.
func (rw refRewriter) target(ref string) (string, error) {
	frag, ok := strings.CutPrefix(ref, "#")
	if !ok {
		frag, ok = rw.inDocument(ref)
	}
	if !ok {
		return "", fmt.Errorf("$ref %q points outside the schema; only references inside it (#/$defs/…) can be described", ref)
	}
	frag, err := url.PathUnescape(frag)
	if err != nil {
		return "", fmt.Errorf("$ref %q: %w", ref, err)
	}
	if frag != "" && !strings.HasPrefix(frag, "/") {
		p, ok := rw.anchors[frag]
		if !ok {
			return "", fmt.Errorf("$ref %q: no $anchor %q in the schema", ref, frag)
		}
		frag = p
	}
	segs := strings.Split(frag, "/")[1:] // frag is "" or starts with "/"
	name, rest := rw.base, frag
	if len(segs) >= 2 && rw.defs[segs[0]] != nil {
		def := unescapePointer(segs[1])
		c, ok := rw.defs[segs[0]][def]
		if !ok {
			return "", fmt.Errorf("$ref %q: no definition %q in the schema", ref, def)
		}
		name, rest = c, strings.Join(append([]string{""}, segs[2:]...), "/")
	}
	return "#" + (&url.URL{Fragment: "/components/schemas/" + name + rest}).EscapedFragment(), nil
}

// inDocument returns the fragment of ref when ref, resolved against the
// schema's $id, names the schema itself (its $id with a fragment).
func (rw refRewriter) inDocument(ref string) (string, bool) {
	if rw.rootID == "" {
		return "", false
	}
	id, err := url.Parse(rw.rootID)
	if err != nil {
		return "", false
	}
	u, err := id.Parse(ref)
	if err != nil {
		return "", false
	}
	frag := u.EscapedFragment()
	u.Fragment, u.RawFragment = "", ""
	id.Fragment, id.RawFragment = "", ""
	return frag, u.String() == id.String()
}

// The keywords whose values are schemas, by the shape of their value.
var (
	schemaKeywords = map[string]bool{
		"not": true, "if": true, "then": true, "else": true, "items": true, "additionalItems": true,
		"contains": true, "additionalProperties": true, "propertyNames": true,
		"unevaluatedItems": true, "unevaluatedProperties": true, "contentSchema": true,
	}
	schemaListKeywords = map[string]bool{"allOf": true, "anyOf": true, "oneOf": true, "prefixItems": true, "items": true}
	schemaMapKeywords  = map[string]bool{
		"properties": true, "patternProperties": true, "dependentSchemas": true,
		"$defs": true, "definitions": true, "dependencies": true,
	}
)

// walkSchema calls visit for n and each of its subschemas that is an
// object, with its JSON pointer from n. It goes only where a keyword
// holds a schema: the values of enum, const, default or examples are
// data, whatever keys they hold.
func walkSchema(n *yaml.Node, ptr string, visit func(n *yaml.Node, ptr string) error) error {
	if n.Kind != yaml.MappingNode {
		return nil
	}
	if err := visit(n, ptr); err != nil {
		return err
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		kw, v := n.Content[i].Value, n.Content[i+1]
		at := ptr + "/" + escapePointer(kw)
		switch {
		case v.Kind == yaml.SequenceNode && schemaListKeywords[kw]:
			for j, sub := range v.Content {
				if err := walkSchema(sub, fmt.Sprintf("%s/%d", at, j), visit); err != nil {
					return err
				}
			}
		case v.Kind == yaml.MappingNode && schemaKeywords[kw]:
			if err := walkSchema(v, at, visit); err != nil {
				return err
			}
		case v.Kind == yaml.MappingNode && schemaMapKeywords[kw]:
			for j := 0; j+1 < len(v.Content); j += 2 {
				if err := walkSchema(v.Content[j+1], at+"/"+escapePointer(v.Content[j].Value), visit); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// jsonNode decodes one JSON document into YAML nodes, keeping the order
// of object members and numbers as written.
func jsonNode(raw []byte) (*yaml.Node, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	n, err := readJSON(dec, 0)
	if err != nil {
		return nil, fmt.Errorf("not a JSON document: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("not a JSON document: data after the schema")
	}
	return n, nil
}

func readJSON(dec *json.Decoder, depth int) (*yaml.Node, error) {
	if depth > maxSchemaDepth {
		return nil, fmt.Errorf("nested deeper than %d levels", maxSchemaDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
			seen := map[string]bool{}
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return nil, err
				}
				key, _ := k.(string)
				if seen[key] {
					return nil, fmt.Errorf("member %q appears twice", key)
				}
				seen[key] = true
				v, err := readJSON(dec, depth+1)
				if err != nil {
					return nil, err
				}
				n.Content = append(n.Content, str(key), v)
			}
			_, err := dec.Token() // }
			return n, err
		case '[':
			n := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Style: yaml.FlowStyle}
			for dec.More() {
				v, err := readJSON(dec, depth+1)
				if err != nil {
					return nil, err
				}
				if v.Kind != yaml.ScalarNode {
					n.Style = 0 // a list of schemas reads better as a block
				}
				n.Content = append(n.Content, v)
			}
			_, err := dec.Token() // ]
			return n, err
		}
	case string:
		return str(t), nil
	case json.Number:
		tag := "!!int"
		if strings.ContainsAny(t.String(), ".eE") {
			tag = "!!float"
		}
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: t.String()}, nil
	case bool:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: fmt.Sprint(t)}, nil
	case nil:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"}, nil
	}
	return nil, fmt.Errorf("unexpected %v", tok)
}

// lookup returns the value of key in mapping n, or nil.
func lookup(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// remove deletes key from mapping n.
func remove(n *yaml.Node, key string) {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			n.Content = append(n.Content[:i], n.Content[i+2:]...)
			return
		}
	}
}

func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

func unescapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~1", "/"), "~0", "~")
}

// pointerText names a place in a schema for an error message.
func pointerText(ptr string) string {
	if ptr == "" {
		return "the schema's root"
	}
	return ptr
}
