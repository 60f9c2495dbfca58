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

// TestDecodeRefusesWhatCannotBeStored: a body every reader would not take
// alike, or that PostgreSQL cannot hold (jsonb has no U+0000; numeric has
// bounds), is malformed — 400 — rather than a write that fails as if the
// database were down.
func TestDecodeRefusesWhatCannotBeStored(t *testing.T) {
	t.Parallel()
	s := spec(t)
	for _, tc := range []struct {
		name, body string
		fields     []FieldError
	}{
		{"NUL in a value", `{"order_id": "o-1\u0000", "customer": {"id": "c"}}`,
			[]FieldError{{"order_id", `holds U+0000 (\u0000), which cannot be stored`}}},
		{"NUL in a name", `{"order_id": "o-1", "customer": {"id": "c", "n\u0000": 1}}`,
			[]FieldError{{"customer", `the member name "n\x00" holds U+0000 (\u0000), which cannot be stored`}}},
		{"NUL deep in an array", `{"order_id": "o", "customer": {"id": "c", "tags": ["a", "\u0000"]}}`,
			[]FieldError{{"customer.tags[1]", `holds U+0000 (\u0000), which cannot be stored`}}},
		{"not UTF-8", "{\"order_id\": \"o-\xff\", \"customer\": {\"id\": \"c\"}}",
			[]FieldError{{"order_id", "bytes that are not UTF-8 in a string; the body must be I-JSON (RFC 7493)"}}},
		{"lone surrogate", `{"order_id": "\ud800", "customer": {"id": "c"}}`,
			[]FieldError{{"order_id", `a high surrogate escape (\ud800) without a low one after it; the body must be I-JSON (RFC 7493)`}}},
		{"duplicate name", `{"order_id": "o-1", "customer": {"id": "c", "id": "d"}}`,
			[]FieldError{{"customer", `duplicate member name "id"; the body must be I-JSON (RFC 7493)`}}},
		{"number too large", `{"order_id": "o", "customer": {"id": "c"}, "quantity": 1e131072}`,
			[]FieldError{{"quantity", "the number 1e131072 is too large to be stored (at most 131072 digits before the decimal point)"}}},
		{"number too precise", `{"order_id": "o", "customer": {"id": "c"}, "quantity": 1.5e-16383}`,
			[]FieldError{{"quantity", "the number 1.5e-16383 has too many digits after the decimal point to be stored (at most 16383)"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := s.Decode([]byte(tc.body))
			var pe *PayloadError
			if !errors.Is(err, ErrMalformed) || !errors.As(err, &pe) {
				t.Fatalf("Decode error = %v, want a *PayloadError wrapping ErrMalformed", err)
			}
			if !slices.Equal(pe.Fields, tc.fields) {
				t.Errorf("fields =\n%s\nwant\n%s", show(pe.Fields), show(tc.fields))
			}
		})
	}
	// What PostgreSQL does hold is a payload like any other.
	for _, body := range []string{
		`{"order_id": "o", "customer": {"id": "c"}, "note": "\ufffd\u0001 😀 \ud83d\ude00"}`,
		`{"order_id": "o", "customer": {"id": "c"}, "big": 1e131071, "small": 123e-16383, "zero": 0e999999999999999999999}`,
	} {
		if _, err := s.Decode([]byte(body)); err != nil {
			t.Errorf("Decode(%s): %v", body, err)
		}
	}
	if _, err := Canonical([]byte(`{"a": 1, "a": 2}`)); !errors.Is(err, ErrMalformed) {
		t.Errorf("Canonical of a document with a duplicate name: %v, want ErrMalformed", err)
	}
}

func TestNumericFault(t *testing.T) {
	t.Parallel()
	// The bounds as PostgreSQL's jsonb applies them: the enqueue tests
	// store each accepted number for real.
	for _, n := range []string{"0", "-0", "1", "1.50", "-1e131071", "9.9e131071", "0.5e131072", "10e131070", "1E+131071",
		"1e-16383", "123e-16383", "0e200000", "0e99999999999999999999999", "0.000e-16380"} {
		if msg := numericFault(n); msg != "" {
			t.Errorf("numericFault(%s) = %q, want none", n, msg)
		}
	}
	for _, n := range []string{"1e131072", "-1e131072", "10e131071", "1e99999999999999999999999", "1e-16384", "1.5e-16383",
		"0e-20000", "0.0e-16383", "1e-99999999999999999999999", "0e-99999999999999999999999"} {
		if numericFault(n) == "" {
			t.Errorf("numericFault(%s) = none, want a fault", n)
		}
	}
}

// A submitted body is bounded in nesting (Request.MaxDepth, 64 by
// default) and refused as invalid; the worker's Spec.Decode reads a job
// recorded before the bound as it was taken.
func TestDecodeBoundsNestingAtSubmit(t *testing.T) {
	t.Parallel()
	s := spec(t)
	nested := func(depth int) []byte {
		return []byte(`{"order_id":"o","customer":{"id":"c"},"x":` + strings.Repeat("[", depth-1) + strings.Repeat("]", depth-1) + "}")
	}
	for _, tc := range []struct {
		depth, max int
		refused    bool
	}{
		{64, 0, false}, {65, 0, true}, {10000, 0, true}, {65, 65, false}, {66, 65, true},
	} {
		_, err := Request{Spec: s, Body: nested(tc.depth), MaxDepth: tc.max}.Decode()
		var pe *PayloadError
		switch {
		case !tc.refused && err != nil:
			t.Errorf("depth %d, max %d: %v, want it taken", tc.depth, tc.max, err)
		case tc.refused && (!errors.As(err, &pe) || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "deeper than")):
			t.Errorf("depth %d, max %d: %v, want an invalid payload nested too deep", tc.depth, tc.max, err)
		}
	}
	if _, err := s.Decode(nested(1000)); err != nil {
		t.Errorf("Spec.Decode of a job recorded 1000 deep: %v", err)
	}
}
