package job

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Template forms a job's business key or resource from its payload:
// literal text with {field} or {field.sub} placeholders, like
// "shipment:{order_id}". The zero Template means "none given".
type Template struct {
	text  string
	parts []part
	// escape holds the bytes Render percent-encodes in a value: '%' and
	// every byte of a literal between two fields; empty when the template
	// has no such literal.
	escape string
}

// part is a literal run of text, or a field when path is set.
type part struct {
	literal string
	path    []string
}

// ParseTemplate reads a template. A field name is [A-Za-z0-9_-]+; dots
// step into nested objects. Braces must pair up, a placeholder must name a
// field, and the template must hold at least one: a key without a field
// would give every job of the task the same identity. Two fields need a
// literal between them, and that literal may not hold '%' (Render's escape
// character): otherwise two different payloads could render one key. No
// literal may hold a control character (Spec.Decode refuses them in
// values too).
func ParseTemplate(s string) (Template, error) {
	t := Template{text: s}
	rest := s
	for rest != "" {
		open := strings.IndexAny(rest, "{}")
		if open < 0 {
			t.parts = append(t.parts, part{literal: rest})
			break
		}
		if rest[open] == '}' {
			return Template{}, fmt.Errorf("template %q: a } at %d closes no {", s, len(s)-len(rest)+open+1)
		}
		if open > 0 {
			t.parts = append(t.parts, part{literal: rest[:open]})
		}
		inner := rest[open+1:]
		end := strings.IndexAny(inner, "{}")
		if end < 0 || inner[end] == '{' {
			return Template{}, fmt.Errorf("template %q: the { at %d is not closed", s, len(s)-len(rest)+open+1)
		}
		name := inner[:end]
		path, err := parseField(name)
		if err != nil {
			return Template{}, fmt.Errorf("template %q: %w", s, err)
		}
		t.parts = append(t.parts, part{path: path})
		rest = inner[end+1:]
	}
	for _, p := range t.parts {
		if r, ok := controlRune(p.literal); ok {
			return Template{}, fmt.Errorf("template %q holds the control character %U, which no key may hold", s, r)
		}
	}
	if len(t.Fields()) == 0 {
		return Template{}, fmt.Errorf("template %q names no {field}: every job of the task would get the same identity", s)
	}
	if err := t.separate(); err != nil {
		return Template{}, fmt.Errorf("template %q: %w", s, err)
	}
	return t, nil
}

// separate fills t.escape from the literals between two fields, refusing a
// template where no literal separates two fields or where one holds '%'.
func (t *Template) separate() error {
	last := -1 // index in t.parts of the last field seen
	for i, p := range t.parts {
		if p.path == nil {
			continue
		}
		if last >= 0 {
			if last == i-1 {
				return fmt.Errorf("{%s}{%s}: two fields need a literal between them, or two payloads could give one key",
					strings.Join(t.parts[last].path, "."), strings.Join(p.path, "."))
			}
			sep := t.parts[i-1].literal
			if strings.Contains(sep, "%") {
				return fmt.Errorf("%q between two fields holds '%%', the character field values are escaped with", sep)
			}
			if t.escape == "" {
				t.escape = "%"
			}
			t.escape += sep
		}
		last = i
	}
	return nil
}

func parseField(name string) ([]string, error) {
	if name == "" {
		return nil, errors.New("{} names no field")
	}
	path := strings.Split(name, ".")
	for _, seg := range path {
		if seg == "" {
			return nil, fmt.Errorf("{%s}: a field name is empty", name)
		}
		if !fieldName(seg) {
			return nil, fmt.Errorf("{%s}: a field name may only contain A-Z, a-z, 0-9, '_' and '-'", name)
		}
	}
	return path, nil
}

func fieldName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return s != ""
}

// String returns the template as written.
func (t Template) String() string { return t.text }

// IsZero reports whether no template was given.
func (t Template) IsZero() bool { return t.parts == nil }

// Fields returns the dotted path of each placeholder, in order.
func (t Template) Fields() []string {
	var fields []string
	for _, p := range t.parts {
		if p.path != nil {
			fields = append(fields, strings.Join(p.path, "."))
		}
	}
	return fields
}

// Render fills the template from a payload decoded with
// json.Decoder.UseNumber. A string renders as itself, a number as the text
// it was written with (10.50 stays 10.50, so the key does not depend on a
// float's formatting) and a boolean as true or false. A field that is
// missing or null, or holds an object or an array, is an error naming it.
//
// Where the template joins two fields with a literal, each value has '%'
// and every byte of those literals percent-encoded ("%3A" for ':'), so
// distinct values always give distinct keys: "pair:{a}:{b}" renders
// a="x:y", b="z" as "pair:x%3Ay:z" and a="x", b="y:z" as "pair:x:y%3Az".
// Other bytes, and every value of a template with one field, render as
// they are.
func (t Template) Render(data any) (string, error) {
	var b strings.Builder
	for _, p := range t.parts {
		if p.path == nil {
			b.WriteString(p.literal)
			continue
		}
		s, err := renderField(data, p.path)
		if err != nil {
			return "", err
		}
		t.writeValue(&b, s)
	}
	return b.String(), nil
}

func (t Template) writeValue(b *strings.Builder, s string) {
	if t.escape == "" {
		b.WriteString(s)
		return
	}
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		c := s[i]
		if strings.IndexByte(t.escape, c) >= 0 {
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
			continue
		}
		b.WriteByte(c)
	}
}

func renderField(data any, path []string) (string, error) {
	v := data
	for i, seg := range path {
		obj, ok := v.(map[string]any)
		if !ok {
			return "", &renderError{field: strings.Join(path[:i], "."), message: "must be a JSON object"}
		}
		if v, ok = obj[seg]; !ok {
			return "", &renderError{field: strings.Join(path[:i+1], "."), message: "is required"}
		}
	}
	field := strings.Join(path, ".")
	switch v := v.(type) {
	case string:
		return v, nil
	case json.Number:
		return v.String(), nil
	case bool:
		return strconv.FormatBool(v), nil
	case float64:
		// Only a payload decoded without UseNumber holds float64.
		return strconv.FormatFloat(v, 'f', -1, 64), nil
	case nil:
		return "", &renderError{field: field, message: "is required (it is null)"}
	}
	return "", &renderError{field: field, message: "must be a string, a number or a boolean: it forms the job's identity"}
}

// renderError names the field a template could not render, so Decode can
// report it as a FieldError.
type renderError struct {
	field, message string
}

func (e *renderError) Error() string { return e.field + ": " + e.message }
