package job

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
)

func spec(t *testing.T) *Spec {
	t.Helper()
	key, err := ParseTemplate("shipment:{order_id}:{customer.id}")
	if err != nil {
		t.Fatal(err)
	}
	res, err := ParseTemplate("order:{order_id}")
	if err != nil {
		t.Fatal(err)
	}
	return &Spec{
		Task: "shipment.book", Queue: "default", BusinessKey: key, Resource: res,
		Schema: compile(t, `{"type": "object", "required": ["order_id", "customer"],
			"properties": {"order_id": {"type": ["string", "number", "object"]}, "quantity": {"type": "integer", "minimum": 1},
			"customer": {"type": "object", "required": ["id"]}}}`),
	}
}

func TestDecode(t *testing.T) {
	t.Parallel()
	s := spec(t)
	for _, tc := range []struct {
		name, body    string
		key, resource string
		kind          error
		fields        []FieldError
	}{
		{name: "valid", body: `{"order_id": "o-1", "quantity": 2, "customer": {"id": "c-1"}}`, key: "shipment:o-1:c-1", resource: "order:o-1"},
		{name: "numbers keep their text", body: ` {"order_id": 10.50e0, "customer": {"id": 7}} `, key: "shipment:10.50e0:7", resource: "order:10.50e0"},
		{name: "empty", body: "", kind: ErrMalformed, fields: []FieldError{{"", "the body is empty; it must be one JSON value"}}},
		{name: "not JSON", body: `{"order_id": "o-1",}`, kind: ErrMalformed},
		{name: "truncated", body: `{"order_id": "o-1"`, kind: ErrMalformed},
		{name: "two values", body: `{"order_id": "o-1"} {}`, kind: ErrMalformed,
			fields: []FieldError{{"", "the body must hold one JSON value, and nothing after it"}}},
		{name: "schema violations", body: `{"quantity": 0, "customer": {}}`, kind: ErrInvalid, fields: []FieldError{
			{"customer.id", "is required"}, {"order_id", "is required"}, {"quantity", "must be at least 1"},
		}},
		{name: "a key field that cannot render", body: `{"order_id": {"a": 1}, "customer": {"id": null}}`, kind: ErrInvalid, fields: []FieldError{
			{"customer.id", "is required (it is null)"},
			{"order_id", "must be a string, a number or a boolean: it forms the job's identity"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, err := s.Decode([]byte(tc.body))
			if tc.kind == nil {
				if err != nil {
					t.Fatalf("Decode: %v", err)
				}
				if p.BusinessKey != tc.key || p.Resource != tc.resource {
					t.Errorf("key %q, resource %q; want %q, %q", p.BusinessKey, p.Resource, tc.key, tc.resource)
				}
				if _, ok := p.Data.(map[string]any)["customer"]; !ok {
					t.Errorf("Data = %#v, want the decoded body", p.Data)
				}
				return
			}
			var pe *PayloadError
			if !errors.Is(err, tc.kind) || !errors.As(err, &pe) {
				t.Fatalf("Decode error = %v, want a *PayloadError wrapping %v", err, tc.kind)
			}
			if tc.fields != nil && !slices.Equal(pe.Fields, tc.fields) {
				t.Errorf("fields =\n%s\nwant\n%s", show(pe.Fields), show(tc.fields))
			}
			if len(pe.Fields) == 0 || !strings.HasPrefix(err.Error(), tc.kind.Error()+": ") {
				t.Errorf("error %q names no field or does not start with %q", err, tc.kind)
			}
		})
	}

	// A Spec without a resource leaves Payload.Resource empty.
	noRes := *s
	noRes.Resource = Template{}
	p, err := noRes.Decode([]byte(`{"order_id": "o", "customer": {"id": "c"}}`))
	if err != nil || p.Resource != "" || p.BusinessKey != "shipment:o:c" {
		t.Errorf("without a resource: %+v, %v", p, err)
	}
}

func TestPayloadError(t *testing.T) {
	t.Parallel()
	err := &PayloadError{Kind: ErrInvalid, Fields: []FieldError{{"order_id", "is required"}, {"", "must be a JSON object"}}}
	if got, want := err.Error(), "invalid payload: order_id: is required; must be a JSON object"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	b, _ := json.Marshal(err.Fields[0])
	if string(b) != `{"field":"order_id","message":"is required"}` {
		t.Errorf("FieldError JSON = %s", b)
	}
}

func TestCanonical(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in, want string
	}{
		{`{ "b": 1, "a": [true, null, "x"] }`, `{"a":[true,null,"x"],"b":1}`},
		{`{"amount": 10.50, "n": 1e3, "big": 123456789012345678901234567890}`, `{"amount":10.50,"big":123456789012345678901234567890,"n":1e3}`},
		{"{\"z\": {\"y\": 1, \"x\": 2}}\n", `{"z":{"x":2,"y":1}}`},
		{`"\u00e9"`, `"é"`},
		{`[]`, `[]`},
	} {
		got, err := Canonical([]byte(tc.in))
		if err != nil || string(got) != tc.want {
			t.Errorf("Canonical(%s) = %s, %v; want %s", tc.in, got, err, tc.want)
		}
	}
	a, _ := Canonical([]byte(`{"a": 1, "b": "x"}`))
	b, _ := Canonical([]byte("{\n  \"b\": \"x\",\n  \"a\": 1\n}"))
	if string(a) != string(b) {
		t.Errorf("the same document written twice: %s != %s", a, b)
	}
	c, _ := Canonical([]byte(`{"a": 1.0, "b": "x"}`))
	if string(a) == string(c) {
		t.Error("1 and 1.0 canonicalise alike; numbers must stay as written")
	}
	for _, bad := range []string{``, `{`, `{} []`, `nope`} {
		if _, err := Canonical([]byte(bad)); !errors.Is(err, ErrMalformed) {
			t.Errorf("Canonical(%q) error = %v, want ErrMalformed", bad, err)
		}
	}
}
