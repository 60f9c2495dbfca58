package job

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
)

func compile(t testing.TB, doc string) *Schema {
	t.Helper()
	s, err := CompileSchema([]byte(doc), "test.json")
	if err != nil {
		t.Fatalf("CompileSchema: %v", err)
	}
	return s
}

func TestCompileSchemaErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, doc, want string
	}{
		{"not JSON", `{"type": "object",}`, `s.json: is not a JSON document: invalid character '}'`},
		{"two documents", `{} {}`, `s.json: is not a JSON document`},
		{"unknown type", `{"type": "objec"}`, `s.json: is not a valid JSON Schema: at /type: value must be one of 'array', 'boolean'`},
		{"keyword of the wrong type", `{"properties": {"a": {"minLength": "x"}}}`, `s.json: is not a valid JSON Schema: at /properties/a/minLength: got string, want integer`},
		{"bad pattern", `{"pattern": "("}`, "s.json: is not a valid JSON Schema: at /pattern: '(' is not valid regex"},
		{"remote reference", `{"$ref": "https://example.com/s.json"}`, `s.json: $ref "https://example.com/s.json" leaves the document; only references inside it (#/$defs/…) are supported`},
		{"file reference", `{"$ref": "other.json"}`, `s.json: $ref "other.json" leaves the document`},
		{"dangling local reference", `{"$ref": "#/$defs/nope"}`, `s.json: does not compile: json-pointer in "#/$defs/nope" not found`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, err := CompileSchema([]byte(tc.doc), "s.json")
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("CompileSchema = %v, %v; want an error starting %q", s, err, tc.want)
			}
			if strings.Contains(err.Error(), schemaURL) || strings.Contains(err.Error(), "\n") {
				t.Errorf("error %q shows the internal URL or spans lines", err)
			}
		})
	}
}

func TestSchemaJSON(t *testing.T) {
	t.Parallel()
	doc := `{"type": "object",  "properties": {"b": {}, "a": {}}}`
	s := compile(t, doc)
	if got := string(s.JSON()); got != doc {
		t.Errorf("JSON() = %s, want the document as given", got)
	}
	s.JSON()[0] = 'x'
	if string(s.JSON()) != doc {
		t.Error("changing the returned document changed the schema")
	}
}

func TestRequires(t *testing.T) {
	t.Parallel()
	s := compile(t, `{
		"type": "object",
		"required": ["order_id", "customer", "ref", "both"],
		"properties": {
			"order_id": {"type": "string"},
			"note": {"type": "string"},
			"customer": {"type": "object", "required": ["id"], "properties": {"id": {}, "name": {}}},
			"ref": {"$ref": "#/$defs/party"},
			"both": {"allOf": [{"$ref": "#/$defs/party"}, {"required": ["extra"]}]},
			"loose": {"type": "object", "required": ["id"]}
		},
		"$defs": {"party": {"type": "object", "required": ["id"], "properties": {"id": {"type": "string"}}}}
	}`)
	for path, want := range map[string]bool{
		"order_id":      true,
		"note":          false,
		"absent":        false,
		"customer":      true,
		"customer.id":   true,
		"customer.name": false,
		"ref.id":        true,
		"both.id":       true,
		"both.extra":    true,
		"loose.id":      false, // "loose" itself may be missing
		"order_id.x":    false,
	} {
		if got := s.Requires(path); got != want {
			t.Errorf("Requires(%q) = %v, want %v", path, got, want)
		}
	}
	if compile(t, `{"$ref": "#/$defs/root", "$defs": {"root": {"required": ["id"]}}}`).Requires("id") != true {
		t.Error(`Requires("id") through a root $ref = false`)
	}
	if compile(t, `true`).Requires("id") {
		t.Error(`the schema true requires "id"`)
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	s := compile(t, `{
		"type": "object",
		"additionalProperties": false,
		"required": ["order_id", "customer"],
		"properties": {
			"order_id": {"type": "string", "minLength": 1, "maxLength": 8, "pattern": "^[^:\\s]+$"},
			"name": {"type": "string", "minLength": 2},
			"amount": {"type": "number", "minimum": 1, "exclusiveMaximum": 10.5, "multipleOf": 0.5},
			"count": {"type": "integer"},
			"delta": {"type": "integer", "not": {"const": 0}},
			"kind": {"enum": ["a", "b"]},
			"fixed": {"const": "x"},
			"email": {"type": "string", "format": "email"},
			"id": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
			"shape": {"anyOf": [{"type": "string", "maxLength": 1}, {"type": "integer", "minimum": 5}]},
			"never": false,
			"customer": {"type": "object", "required": ["id"], "properties": {"id": {"$ref": "#/$defs/id"}}},
			"items": {"type": "array", "maxItems": 2, "uniqueItems": true,
				"items": {"type": "object", "required": ["sku"], "properties": {"sku": {"type": "string"}}}},
			"flag": {"type": "boolean"},
			"odd key": {"type": "string"}
		},
		"$defs": {"id": {"type": "string", "minLength": 1}}
	}`)
	for _, tc := range []struct {
		name, body string
		want       []FieldError
	}{
		{"valid", `{"order_id": "o-1", "customer": {"id": "c"}, "amount": 2.5, "delta": -3, "items": [{"sku": "s"}]}`, nil},
		{"missing fields", `{}`, []FieldError{{"customer", "is required"}, {"order_id", "is required"}}},
		{"missing nested field", `{"order_id": "o", "customer": {}}`, []FieldError{{"customer.id", "is required"}}},
		{"unknown fields", `{"order_id": "o", "customer": {"id": "c"}, "zz": 1, "aa": 2}`,
			[]FieldError{{"aa", "is not a field of this task"}, {"zz", "is not a field of this task"}}},
		{"types", `{"order_id": 1, "customer": "c", "count": 1.5, "flag": "yes", "items": {}}`, []FieldError{
			{"count", "must be a JSON integer"},
			{"customer", "must be a JSON object"},
			{"flag", "must be a JSON boolean"},
			{"items", "must be a JSON array"},
			{"order_id", "must be a JSON string"},
		}},
		{"the whole body", `[1]`, []FieldError{{"", "must be a JSON object"}}},
		{"strings", `{"order_id": "a b:c-very-long", "customer": {"id": ""}, "name": "x", "email": "nope"}`, []FieldError{
			{"customer.id", "must not be empty"},
			{"email", "must be a valid email"},
			{"name", "must be at least 2 characters"},
			{"order_id", "must be at most 8 characters"},
			{"order_id", `must match the pattern ^[^:\s]+$`},
		}},
		{"numbers", `{"order_id": "o", "customer": {"id": "c"}, "amount": 0.75}`, []FieldError{
			{"amount", "must be at least 1"},
			{"amount", "must be a multiple of 0.5"},
		}},
		{"exclusive maximum", `{"order_id": "o", "customer": {"id": "c"}, "amount": 10.5}`, []FieldError{{"amount", "must be less than 10.5"}}},
		{"not, enum and const", `{"order_id": "o", "customer": {"id": "c"}, "delta": 0, "kind": "c", "fixed": "y"}`, []FieldError{
			{"delta", "must not be 0"},
			{"fixed", `must be "x"`},
			{"kind", `must be one of "a", "b"`},
		}},
		{"alternatives", `{"order_id": "o", "customer": {"id": "c"}, "id": true, "shape": "long"}`, []FieldError{
			{"id", "must be a JSON string or integer"},
			{"shape", "does not match any of the allowed shapes"},
		}},
		{"a field the schema forbids", `{"order_id": "o", "customer": {"id": "c"}, "never": 1}`, []FieldError{{"never", "is not allowed"}}},
		{"arrays", `{"order_id": "o", "customer": {"id": "c"}, "items": [{"sku": "a"}, {"sku": 2}, {}]}`, []FieldError{
			{"items", "must have at most 2 items"},
			{"items[1].sku", "must be a JSON string"},
			{"items[2].sku", "is required"},
		}},
		{"unique items", `{"order_id": "o", "customer": {"id": "c"}, "items": [{"sku": "a"}, {"sku": "a"}]}`,
			[]FieldError{{"items", "must not repeat an item (items 0 and 1 are equal)"}}},
		{"a name a path cannot hold", `{"order_id": "o", "customer": {"id": "c"}, "odd key": 1}`, []FieldError{{`["odd key"]`, "must be a JSON string"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := s.Validate(mustJSON(t, tc.body))
			if !slices.Equal(got, tc.want) {
				t.Errorf("Validate(%s) =\n%s\nwant\n%s", tc.body, show(got), show(tc.want))
			}
		})
	}
}

// TestExampleSchemas checks the example jobs' schemas say what the Go
// validation of the examples said: the same fields, with the same rules.
func TestExampleSchemas(t *testing.T) {
	t.Parallel()
	load := func(t *testing.T, task string) *Schema {
		doc, err := os.ReadFile("../examples/schemas/" + task + ".json")
		if err != nil {
			t.Fatal(err)
		}
		return compile(t, string(doc))
	}
	for _, tc := range []struct {
		task, body string
		want       []FieldError
	}{
		{"invoice.create", `{"order_id": "o-1", "amount_cents": 1250, "currency": "EUR"}`, nil},
		{"invoice.create", `{"order_id": "o 1", "amount_cents": 0, "currency": "eur", "x": 1}`, []FieldError{
			{"amount_cents", "must be at least 1"},
			{"currency", "must match the pattern ^[A-Z]{3}$"},
			{"order_id", `must match the pattern ^[^:\s]*$`},
			{"x", "is not a field of this task"},
		}},
		{"inventory.adjust", `{"adjustment_id": "a-1", "sku": "s-1", "delta": -2}`, nil},
		{"inventory.adjust", `{"adjustment_id": "", "sku": "s:1", "delta": 0}`, []FieldError{
			{"adjustment_id", "must not be empty"},
			{"delta", "must not be 0"},
			{"sku", `must match the pattern ^[^:\s]*$`},
		}},
		{"payment.charge", `{"payment_id": "p-1", "amount_cents": 1, "currency": "USD"}`, nil},
		{"payment.charge", `{"payment_id": "p-1", "amount_cents": 1.5}`, []FieldError{
			{"amount_cents", "must be a JSON integer"},
			{"currency", "is required"},
		}},
		{"notification.send", `{"event_id": "e-1", "user_id": "u-1", "template": "welcome"}`, nil},
		{"notification.send", `{"event_id": "` + strings.Repeat("e", 129) + `", "user_id": "u-1"}`, []FieldError{
			{"event_id", "must be at most 128 characters"},
			{"template", "is required"},
		}},
	} {
		t.Run(tc.task, func(t *testing.T) {
			t.Parallel()
			got := load(t, tc.task).Validate(mustJSON(t, tc.body))
			if !slices.Equal(got, tc.want) {
				t.Errorf("Validate(%s) =\n%s\nwant\n%s", tc.body, show(got), show(tc.want))
			}
		})
	}
}

func show(fs []FieldError) string {
	b, _ := json.MarshalIndent(fs, "", " ")
	return string(b)
}
