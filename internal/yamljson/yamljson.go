// Package yamljson converts YAML to JSON without losing what JSON can
// say: the order of keys, numbers as written, strings that look like other
// types. The configuration converts job schemas with it, and the OpenAPI
// package its description; a generic decode would sort keys and round
// numbers.
//
//	doc, err := yamljson.Convert(&node)
package yamljson

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"

	"go.yaml.in/yaml/v3"
)

// Convert writes a YAML document (or any node of one) as compact JSON,
// keeping the order of keys and numbers as written (minimum: 1.50 stays
// 1.50). YAML that has no JSON form (merge keys, a key set twice, a key
// that is not a scalar, .inf) is refused with its line. Aliases are
// followed, within a budget, so a small file cannot expand into a huge
// document. An empty document is null.
func Convert(n *yaml.Node) ([]byte, error) {
	if n.Kind == 0 {
		return []byte("null"), nil
	}
	w := jsonWriter{budget: 100_000}
	if err := w.write(n, 0); err != nil {
		return nil, err
	}
	return w.buf.Bytes(), nil
}

type jsonWriter struct {
	buf    bytes.Buffer
	budget int // nodes left to write
}

func (w *jsonWriter) write(n *yaml.Node, depth int) error {
	if w.budget--; w.budget < 0 {
		return fmt.Errorf("line %d: the document is too large (over 100000 values once aliases are expanded)", n.Line)
	}
	if depth > 100 {
		return fmt.Errorf("line %d: the document is nested more than 100 levels deep", n.Line)
	}
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			w.buf.WriteString("null")
			return nil
		}
		return w.write(n.Content[0], depth)
	case yaml.AliasNode:
		if n.Alias == nil {
			return fmt.Errorf("line %d: an alias to no anchor", n.Line)
		}
		return w.write(n.Alias, depth+1)
	case yaml.MappingNode:
		w.buf.WriteByte('{')
		seen := map[string]int{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode {
				return fmt.Errorf("line %d: a key must be a plain name, not %s", k.Line, describe(k))
			}
			if k.ShortTag() == "!!merge" {
				return fmt.Errorf("line %d: merge keys (<<) have no JSON form; write the keys out", k.Line)
			}
			if line, dup := seen[k.Value]; dup {
				return fmt.Errorf("line %d: %q is set twice (first on line %d)", k.Line, k.Value, line)
			}
			seen[k.Value] = k.Line
			if i > 0 {
				w.buf.WriteByte(',')
			}
			writeJSONString(&w.buf, k.Value)
			w.buf.WriteByte(':')
			if err := w.write(v, depth+1); err != nil {
				return err
			}
		}
		w.buf.WriteByte('}')
		return nil
	case yaml.SequenceNode:
		w.buf.WriteByte('[')
		for i, item := range n.Content {
			if i > 0 {
				w.buf.WriteByte(',')
			}
			if err := w.write(item, depth+1); err != nil {
				return err
			}
		}
		w.buf.WriteByte(']')
		return nil
	}
	return w.scalar(n)
}

func (w *jsonWriter) scalar(n *yaml.Node) error {
	switch n.ShortTag() {
	case "!!null":
		w.buf.WriteString("null")
	case "!!bool":
		var b bool
		if err := n.Decode(&b); err != nil {
			return fmt.Errorf("line %d: %q is not a boolean", n.Line, n.Value)
		}
		w.buf.WriteString(strconv.FormatBool(b))
	case "!!int", "!!float":
		if jsonNumber(n.Value) {
			w.buf.WriteString(n.Value)
			return nil
		}
		// YAML spellings JSON lacks: 0x1f, 0o17, +1, .5, 1_000.
		var f float64
		if err := n.Decode(&f); err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
			return fmt.Errorf("line %d: %s has no JSON form", n.Line, n.Value)
		}
		w.buf.WriteString(strconv.FormatFloat(f, 'g', -1, 64))
	default:
		// Strings, and tags JSON has no type for (timestamps, binary),
		// are kept as the text written.
		writeJSONString(&w.buf, n.Value)
	}
	return nil
}

// jsonNumber reports whether s is a number as JSON writes one.
func jsonNumber(s string) bool {
	return s != "" && (s[0] == '-' || s[0] >= '0' && s[0] <= '9') && json.Valid([]byte(s))
}

func writeJSONString(buf *bytes.Buffer, s string) {
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)           // a Go string always encodes
	buf.Truncate(buf.Len() - 1) // Encode ends with a newline
}

// describe names a node that cannot be a key.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	return "an alias"
}
