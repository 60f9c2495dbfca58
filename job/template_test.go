package job

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/ijson"
)

func TestParseTemplate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in     string
		fields []string
		err    string // a part of the error; "" means valid
	}{
		{in: "shipment:{order_id}", fields: []string{"order_id"}},
		{in: "{customer.id}/{order_id}", fields: []string{"customer.id", "order_id"}},
		{in: "email:{template}:{user_id}:{event_id}", fields: []string{"template", "user_id", "event_id"}},
		{in: "{a-b_C9}", fields: []string{"a-b_C9"}},
		{in: "{a.b.c}x", fields: []string{"a.b.c"}},
		{in: "", err: "names no {field}"},
		{in: "invoice", err: "names no {field}"},
		{in: "invoice:{}", err: "{} names no field"},
		{in: "invoice:{order_id", err: "the { at 9 is not closed"},
		{in: "invoice:order_id}", err: "a } at 17 closes no {"},
		{in: "{a{b}}", err: "the { at 1 is not closed"},
		{in: "{a.}", err: "a field name is empty"},
		{in: "{.a}", err: "a field name is empty"},
		{in: "{order id}", err: "may only contain"},
		{in: "{ü}", err: "may only contain"},
		{in: "{a}{b}", err: "{a}{b}: two fields need a literal between them"},
		{in: "x:{a}{b.c}:y", err: "{a}{b.c}: two fields need a literal between them"},
		{in: "{a}%{b}", err: `"%" between two fields holds '%'`},
		{in: "%{a}%", fields: []string{"a"}},
	} {
		t.Run(tc.in, func(t *testing.T) {
			t.Parallel()
			tpl, err := ParseTemplate(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("ParseTemplate(%q) error = %v, want one containing %q", tc.in, err, tc.err)
				}
				if !tpl.IsZero() {
					t.Errorf("a refused template is not zero: %+v", tpl)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseTemplate(%q): %v", tc.in, err)
			}
			if got := tpl.Fields(); !slices.Equal(got, tc.fields) {
				t.Errorf("Fields() = %q, want %q", got, tc.fields)
			}
			if tpl.String() != tc.in || tpl.IsZero() {
				t.Errorf("String() = %q, IsZero() = %v; want %q, false", tpl.String(), tpl.IsZero(), tc.in)
			}
		})
	}
	var zero Template
	if !zero.IsZero() || zero.String() != "" || zero.Fields() != nil {
		t.Errorf("the zero Template: IsZero %v, String %q, Fields %q", zero.IsZero(), zero.String(), zero.Fields())
	}
}

func TestRender(t *testing.T) {
	t.Parallel()
	data := mustJSON(t, `{"order_id": "o-1", "amount": 10.50, "n": 7, "big": 12345678901234567890, "ok": true,
		"customer": {"id": "c-9", "tags": ["a"], "none": null}, "items": [1]}`)
	for _, tc := range []struct {
		tpl, want, err string
	}{
		{tpl: "shipment:{order_id}", want: "shipment:o-1"},
		{tpl: "{customer.id}/{order_id}", want: "c-9/o-1"},
		{tpl: "price:{amount}", want: "price:10.50"},
		{tpl: "{n}-{big}-{ok}", want: "7-12345678901234567890-true"},
		{tpl: "{customer.id}.{order_id}", want: "c-9.o-1"},
		{tpl: "{customer.id}-{order_id}", want: "c%2D9-o%2D1"},
		{tpl: "x:{missing}", err: "missing: is required"},
		{tpl: "x:{customer.missing}", err: "customer.missing: is required"},
		{tpl: "x:{customer.none}", err: "customer.none: is required (it is null)"},
		{tpl: "x:{customer}", err: "customer: must be a string, a number or a boolean: it forms the job's identity"},
		{tpl: "x:{items}", err: "items: must be a string, a number or a boolean: it forms the job's identity"},
		{tpl: "x:{order_id.sub}", err: "order_id: must be a JSON object"},
	} {
		t.Run(tc.tpl, func(t *testing.T) {
			t.Parallel()
			tpl, err := ParseTemplate(tc.tpl)
			if err != nil {
				t.Fatal(err)
			}
			got, err := tpl.Render(data)
			if tc.err != "" {
				if err == nil || err.Error() != tc.err {
					t.Fatalf("Render = %q, %v; want error %q", got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("Render = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// TestRenderEscapes: values that hold a template's separator or the
// escape character give distinct keys, and plain values render as before.
func TestRenderEscapes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		tpl        string
		a, b, want string
	}{
		{"pair:{a}:{b}", "x:y", "z", "pair:x%3Ay:z"},
		{"pair:{a}:{b}", "x", "y:z", "pair:x:y%3Az"},
		{"pair:{a}:{b}", "%3A", "z", "pair:%253A:z"},
		{"pair:{a}:{b}", "Order-1_a.B", "9", "pair:Order-1_a.B:9"},
		{"pair:{a}:{b}", "a/b c", "é", "pair:a/b c:é"},
		{"{a}/{b}", "x/y", "z", "x%2Fy/z"},
		{"{a} & {b}", "x & y", "z", "x%20%26%20y & z"},
		{"one:{a}", "x:y%z", "", "one:x:y%z"},
	} {
		t.Run(tc.tpl+" "+tc.a+" "+tc.b, func(t *testing.T) {
			t.Parallel()
			tpl, err := ParseTemplate(tc.tpl)
			if err != nil {
				t.Fatal(err)
			}
			got, err := tpl.Render(map[string]any{"a": tc.a, "b": tc.b})
			if err != nil || got != tc.want {
				t.Errorf("Render = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// FuzzRenderInjective: two payloads whose values differ never render one
// key, whatever the template.
func FuzzRenderInjective(f *testing.F) {
	f.Add("pair:{a}:{b}", "x:y", "z", "x", "y:z")
	f.Add("{a}-{b}", "x-y", "z", "x", "y-z")
	f.Add("{a}.{b}.", "1.2", "3", "1", "2.3")
	f.Add("k:{a}:{b}", "%3A", "", ":", "")
	f.Add("{a}x{b}", "%78", "", "x", "")
	f.Fuzz(func(t *testing.T, s, a1, b1, a2, b2 string) {
		tpl, err := ParseTemplate(s)
		if err != nil {
			return
		}
		for _, f := range tpl.Fields() {
			if f != "a" && f != "b" {
				return
			}
		}
		k1, err1 := tpl.Render(map[string]any{"a": a1, "b": b1})
		k2, err2 := tpl.Render(map[string]any{"a": a2, "b": b2})
		if err1 != nil || err2 != nil {
			t.Fatalf("Render: %v, %v", err1, err2)
		}
		same := true
		for _, f := range tpl.Fields() {
			if f == "a" && a1 != a2 || f == "b" && b1 != b2 {
				same = false
			}
		}
		if (k1 == k2) != same {
			t.Fatalf("%q renders a=%q b=%q as %q and a=%q b=%q as %q", s, a1, b1, k1, a2, b2, k2)
		}
	})
}

func FuzzParseTemplate(f *testing.F) {
	for _, s := range []string{"shipment:{order_id}", "{customer.id}/{order_id}", "{}", "{a{b}}", "a}", "{a..b}", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tpl, err := ParseTemplate(s)
		if err != nil {
			if !tpl.IsZero() {
				t.Fatalf("refused %q but returned a template", s)
			}
			return
		}
		if tpl.String() != s {
			t.Fatalf("String() = %q, want %q", tpl.String(), s)
		}
		fields := tpl.Fields()
		if len(fields) == 0 {
			t.Fatalf("accepted %q without a field", s)
		}
		again, err := ParseTemplate(tpl.String())
		if err != nil || !slices.Equal(again.Fields(), fields) {
			t.Fatalf("re-parsing %q: %v, fields %q, want %q", s, err, again.Fields(), fields)
		}
		// A payload holding every field renders, and each value appears.
		data := map[string]any{}
		for i, f := range fields {
			obj := data
			path := strings.Split(f, ".")
			for _, seg := range path[:len(path)-1] {
				next, ok := obj[seg].(map[string]any)
				if !ok {
					next = map[string]any{}
					obj[seg] = next
				}
				obj = next
			}
			obj[path[len(path)-1]] = json.Number(strings.Repeat("1", i+1))
		}
		if _, err := tpl.Render(data); err != nil && !strings.Contains(err.Error(), "must be a JSON object") && !strings.Contains(err.Error(), "must be a string") {
			// Only a field that is both a leaf and a parent ({a}:{a.b})
			// may fail to render.
			t.Fatalf("Render(%q): %v", s, err)
		}
	})
}

func mustJSON(t testing.TB, s string) any {
	t.Helper()
	v, err := ijson.Decode([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return v
}
