package job

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
)

// Schema is a compiled JSON Schema (draft 2020-12) of a job's payload.
type Schema struct {
	raw      json.RawMessage
	doc      any // raw, decoded, to read keywords an error kind leaves out
	compiled *jsonschema.Schema
}

// schemaURL names the document inside the compiler. It is never shown: a
// reference resolved against it that leaves the document fails, since the
// compiler has no loader for the scheme.
const schemaURL = "mem:///schema.json"

// CompileSchema compiles a JSON Schema document; a document without
// "$schema" is read as draft 2020-12. Only references inside the document
// ("#/$defs/…") resolve: a schema never fetches anything. "format" is
// asserted (an "email" field must hold an e-mail address), as most
// validators do. The error reads "LOCATION: PROBLEM", with location naming
// the document (a file path, or "jobs[2].schema").
func CompileSchema(doc []byte, location string) (*Schema, error) {
	parsed, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return nil, fmt.Errorf("%s: is not a JSON document: %s", location, strings.TrimPrefix(err.Error(), "json: "))
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(jsonschema.SchemeURLLoader{})
	c.AssertFormat()
	if err := c.AddResource(schemaURL, parsed); err != nil {
		return nil, fmt.Errorf("%s: %s", location, compileMessage(err))
	}
	compiled, err := c.Compile(schemaURL)
	if err != nil {
		return nil, fmt.Errorf("%s: %s", location, compileMessage(err))
	}
	return &Schema{raw: bytes.Clone(doc), doc: parsed, compiled: compiled}, nil
}

// compileMessage says why a schema does not compile without the internal
// URL the compiler knows it by.
func compileMessage(err error) string {
	var sve *jsonschema.SchemaValidationError
	var ve *jsonschema.ValidationError
	if errors.As(err, &sve) && errors.As(sve.Err, &ve) {
		// One message per place: the alternatives of an anyOf in the
		// meta-schema ("a type name, or a list of them") say one thing.
		var msgs, places []string
		for _, leaf := range leaves(ve) {
			at := pointer(leaf.InstanceLocation)
			if !slices.Contains(places, at) {
				places = append(places, at)
				msgs = append(msgs, fmt.Sprintf("at %s: %s", at, leafText(leaf)))
			}
		}
		return "is not a valid JSON Schema: " + strings.Join(msgs, "; ")
	}
	var le *jsonschema.LoadURLError
	if errors.As(err, &le) {
		return fmt.Sprintf("$ref %q leaves the document; only references inside it (#/$defs/…) are supported", strings.TrimPrefix(le.URL, "mem:///"))
	}
	msg := strings.ReplaceAll(err.Error(), schemaURL, "")
	return "does not compile: " + oneLine(msg)
}

// leaves returns the innermost errors under e: the violations themselves,
// without the groups that only say "a subschema failed".
func leaves(e *jsonschema.ValidationError) []*jsonschema.ValidationError {
	if len(e.Causes) == 0 {
		return []*jsonschema.ValidationError{e}
	}
	var out []*jsonschema.ValidationError
	for _, c := range e.Causes {
		out = append(out, leaves(c)...)
	}
	return out
}

func pointer(tokens []string) string {
	if len(tokens) == 0 {
		return "the root"
	}
	var b strings.Builder
	for _, t := range tokens {
		b.WriteByte('/')
		b.WriteString(strings.ReplaceAll(strings.ReplaceAll(t, "~", "~0"), "/", "~1"))
	}
	return b.String()
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// JSON returns the document as it was given, for the OpenAPI description.
func (s *Schema) JSON() json.RawMessage { return bytes.Clone(s.raw) }

// Requires reports whether every payload the schema accepts has the field
// at the dotted path: each name on the path is in the "required" list of
// its object, directly or through "$ref" or "allOf". A template may only
// name such fields, so that a valid payload always forms its key.
func (s *Schema) Requires(path string) bool {
	scopes := []*jsonschema.Schema{s.compiled}
	for seg := range strings.SplitSeq(path, ".") {
		var next []*jsonschema.Schema
		required := false
		for _, sc := range scopes {
			for _, sub := range conjuncts(sc) {
				if slices.Contains(sub.Required, seg) {
					required = true
				}
				if p, ok := sub.Properties[seg]; ok {
					next = append(next, p)
				}
			}
		}
		if !required {
			return false
		}
		scopes = next
	}
	return true
}

// conjuncts returns sc and every schema it must also satisfy through
// "$ref" and "allOf", each once.
func conjuncts(sc *jsonschema.Schema) []*jsonschema.Schema {
	var out []*jsonschema.Schema
	var add func(*jsonschema.Schema)
	add = func(x *jsonschema.Schema) {
		if x == nil || slices.Contains(out, x) || len(out) > 1000 {
			return
		}
		out = append(out, x)
		add(x.Ref)
		for _, a := range x.AllOf {
			add(a)
		}
	}
	add(sc)
	return out
}

// Validate checks a payload decoded with json.Decoder.UseNumber and
// returns one FieldError per violation, sorted by field; none when the
// payload is valid.
func (s *Schema) Validate(data any) []FieldError {
	err := s.compiled.Validate(data)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return []FieldError{{Field: "", Message: "cannot be validated: " + oneLine(err.Error())}}
	}
	var out []FieldError
	s.collect(ve, data, &out)
	return sortFields(out)
}

// sortFields orders faults by field, keeping the order within a field,
// and drops repeats (one fault reached through two subschemas).
func sortFields(fs []FieldError) []FieldError {
	seen := map[FieldError]bool{}
	out := fs[:0]
	for _, f := range fs {
		if !seen[f] {
			seen[f] = true
			out = append(out, f)
		}
	}
	slices.SortStableFunc(out, func(a, b FieldError) int { return strings.Compare(a.Field, b.Field) })
	return out
}

// collect appends the violations under e. The groups that only say "a
// subschema failed" (the root, $ref, allOf, properties) are walked through;
// anyOf and oneOf are one violation each, since their causes are
// alternatives the payload could have matched, not faults to fix.
func (s *Schema) collect(e *jsonschema.ValidationError, data any, out *[]FieldError) {
	field := fieldPath(data, e.InstanceLocation)
	add := func(f, msg string) { *out = append(*out, FieldError{Field: f, Message: msg}) }
	switch k := e.ErrorKind.(type) {
	case *kind.Schema, *kind.Reference, *kind.Group, *kind.AllOf:
		if len(e.Causes) == 0 {
			add(field, "does not match the schema")
		}
		for _, c := range e.Causes {
			s.collect(c, data, out)
		}
	case *kind.AnyOf, *kind.OneOf:
		add(field, alternatives(e))
	case *kind.Required:
		for _, name := range k.Missing {
			add(child(field, name), "is required")
		}
	case *kind.DependentRequired:
		for _, name := range k.Missing {
			add(child(field, name), fmt.Sprintf("is required when %s is given", k.Prop))
		}
	case *kind.Dependency:
		for _, name := range k.Missing {
			add(child(field, name), fmt.Sprintf("is required when %s is given", k.Prop))
		}
	case *kind.AdditionalProperties:
		for _, name := range k.Properties {
			add(child(field, name), "is not a field of this task")
		}
	case *kind.FalseSchema:
		add(field, "is not allowed")
	case *kind.Not:
		add(field, s.notMessage(e.SchemaURL))
	default:
		add(field, message(e))
	}
}

// message words one violation for a client, in place of the validator's
// own phrasing.
func message(e *jsonschema.ValidationError) string {
	switch k := e.ErrorKind.(type) {
	case *kind.Type:
		return "must be a JSON " + either(k.Want)
	case *kind.Enum:
		return "must be one of " + values(k.Want)
	case *kind.Const:
		return "must be " + value(k.Want)
	case *kind.Format:
		return "must be a valid " + k.Want
	case *kind.MinLength:
		if k.Want == 1 {
			return "must not be empty"
		}
		return fmt.Sprintf("must be at least %d characters", k.Want)
	case *kind.MaxLength:
		return fmt.Sprintf("must be at most %d characters", k.Want)
	case *kind.Pattern:
		return "must match the pattern " + k.Want
	case *kind.Minimum:
		return "must be at least " + decimal(k.Want)
	case *kind.Maximum:
		return "must be at most " + decimal(k.Want)
	case *kind.ExclusiveMinimum:
		return "must be greater than " + decimal(k.Want)
	case *kind.ExclusiveMaximum:
		return "must be less than " + decimal(k.Want)
	case *kind.MultipleOf:
		return "must be a multiple of " + decimal(k.Want)
	case *kind.MinItems:
		return fmt.Sprintf("must have at least %d items", k.Want)
	case *kind.MaxItems:
		return fmt.Sprintf("must have at most %d items", k.Want)
	case *kind.UniqueItems:
		return fmt.Sprintf("must not repeat an item (items %d and %d are equal)", k.Duplicates[0], k.Duplicates[1])
	case *kind.MinProperties:
		return fmt.Sprintf("must have at least %d fields", k.Want)
	case *kind.MaxProperties:
		return fmt.Sprintf("must have at most %d fields", k.Want)
	case *kind.PropertyNames:
		return fmt.Sprintf("has a field name that is not allowed: %q", k.Property)
	case *kind.Contains:
		return "must contain a matching item"
	case *kind.MinContains:
		return fmt.Sprintf("must contain at least %d matching items", k.Want)
	case *kind.MaxContains:
		return fmt.Sprintf("must contain at most %d matching items", k.Want)
	case *kind.AdditionalItems:
		return "has more items than allowed"
	}
	return leafText(e)
}

// leafText is the validator's own words for a violation without causes,
// less the location it starts with.
func leafText(e *jsonschema.ValidationError) string {
	msg := oneLine(e.Error())
	if _, rest, ok := strings.Cut(msg, "': "); ok && strings.HasPrefix(msg, "at '") {
		return rest
	}
	return msg
}

// alternatives words a failed anyOf or oneOf. When every alternative is a
// type, the message lists them: "must be a JSON string or integer".
func alternatives(e *jsonschema.ValidationError) string {
	if k, ok := e.ErrorKind.(*kind.OneOf); ok && len(k.Subschemas) > 1 {
		return "matches more than one of the allowed shapes"
	}
	var types []string
	for _, l := range leaves(e) {
		t, ok := l.ErrorKind.(*kind.Type)
		if !ok || !slices.Equal(l.InstanceLocation, e.InstanceLocation) {
			return "does not match any of the allowed shapes"
		}
		for _, w := range t.Want {
			if !slices.Contains(types, w) {
				types = append(types, w)
			}
		}
	}
	if len(types) == 0 {
		return "does not match any of the allowed shapes"
	}
	return "must be a JSON " + either(types)
}

// either lists choices as a sentence does: "a", "a or b", "a, b or c".
func either(choices []string) string {
	if len(choices) < 2 {
		return strings.Join(choices, "")
	}
	return strings.Join(choices[:len(choices)-1], ", ") + " or " + choices[len(choices)-1]
}

// notMessage words a failed "not": "must not be 0" for the usual
// {"not": {"const": 0}}, which the error kind does not carry.
func (s *Schema) notMessage(schemaURL string) string {
	_, frag, _ := strings.Cut(schemaURL, "#")
	if obj, ok := lookup(s.doc, frag).(map[string]any); ok {
		if not, ok := obj["not"].(map[string]any); ok && len(not) == 1 {
			if c, ok := not["const"]; ok {
				return "must not be " + value(c)
			}
			if e, ok := not["enum"].([]any); ok {
				return "must not be one of " + values(e)
			}
		}
	}
	return "is not allowed"
}

// lookup resolves a JSON Pointer in doc; nil when it leads nowhere.
func lookup(doc any, ptr string) any {
	if ptr == "" {
		return doc
	}
	v := doc
	for tok := range strings.SplitSeq(strings.TrimPrefix(ptr, "/"), "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch t := v.(type) {
		case map[string]any:
			v = t[tok]
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(t) {
				return nil
			}
			v = t[i]
		default:
			return nil
		}
	}
	return v
}

// fieldPath writes an instance location as the examples report fields:
// dotted names, array indices in brackets (items[2].sku). Whether a token
// is an index is read from the payload, since "2" may also be a name.
func fieldPath(data any, loc []string) string {
	field := ""
	v := data
	for _, tok := range loc {
		if arr, ok := v.([]any); ok {
			field += "[" + tok + "]"
			v = nil
			if i, err := strconv.Atoi(tok); err == nil && i >= 0 && i < len(arr) {
				v = arr[i]
			}
			continue
		}
		if obj, ok := v.(map[string]any); ok {
			v = obj[tok]
		} else {
			v = nil
		}
		field = child(field, tok)
	}
	return field
}

// child appends a name to a field path, quoting a name a dotted path
// cannot hold.
func child(field, name string) string {
	if !fieldName(name) {
		return field + "[" + strconv.Quote(name) + "]"
	}
	if field == "" {
		return name
	}
	return field + "." + name
}

func value(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

func values(vs []any) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = value(v)
	}
	return strings.Join(parts, ", ")
}

// decimal writes a schema bound as a plain decimal (10.5, not 21/2).
func decimal(r *big.Rat) string {
	if r.IsInt() {
		return r.Num().String()
	}
	if n, exact := r.FloatPrec(); exact {
		return r.FloatString(n)
	}
	return r.FloatString(6)
}
