package job

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// TestDecodeRefusesKeysThatCannotBeStored: the keys a payload forms are
// checked with the payload, each fault naming its field, so that a key
// that cannot be stored or sent never reaches the queue.
func TestDecodeRefusesKeysThatCannotBeStored(t *testing.T) {
	t.Parallel()
	s := spec(t)
	key, err := ParseTemplate("{ref}")
	if err != nil {
		t.Fatal(err)
	}
	acct, err := ParseTemplate("{tenant}/{account}")
	if err != nil {
		t.Fatal(err)
	}
	s.Limits = []FlowLimitUse{{Limit: FlowLimit{Name: "ship-api", Concurrency: 1}, Key: acct}}
	bare := &Spec{Task: "t", BusinessKey: key}
	long := strings.Repeat("x", MaxKeyBytes)
	for _, tc := range []struct {
		name, body string
		spec       *Spec
		fields     []FieldError // nil: accepted
	}{
		{"CR LF", `{"order_id": "o\r\n1", "customer": {"id": "c"}, "account": "a"}`, s, []FieldError{
			{"order_id", "holds the control character U+000D, which a business key may not hold"},
			{"order_id", "holds the control character U+000D, which a resource may not hold"},
		}},
		{"tab in a nested field", `{"order_id": "o", "customer": {"id": "c\t"}, "account": "a"}`, s, []FieldError{
			{"customer.id", "holds the control character U+0009, which a business key may not hold"},
		}},
		{"C1 control", `{"order_id": "o", "customer": {"id": "c"}, "account": "a\u0085"}`, s, []FieldError{
			{"account", "holds the control character U+0085, which a flow limit's key (ship-api) may not hold"},
		}},
		{"a limit's field missing", `{"order_id": "o", "customer": {"id": "c"}}`, s, []FieldError{
			{"account", "is required"},
		}},
		{"too long, the longest field named", `{"order_id": "o", "customer": {"id": "` + long + `"}, "account": "a"}`, s, []FieldError{
			{"customer.id", "forms a business key of 523 bytes; at most 512 are allowed"},
		}},
		{"too long, escaped", `{"order_id": "` + strings.Repeat(":", 200) + `", "customer": {"id": "c"}, "account": "a"}`, s, []FieldError{
			{"order_id", "forms a business key of 611 bytes; at most 512 are allowed"},
		}},
		{"at the bound", `{"order_id": "` + long[:MaxKeyBytes-len("shipment::c")] + `", "customer": {"id": "c"}, "account": "a"}`, s, nil},
		{"a long limit key", `{"order_id": "o", "customer": {"id": "c"}, "account": "` + strings.Repeat(long, 20) + `"}`, s, nil},
		{"unicode text", `{"order_id": "ö—✓", "customer": {"id": "😀"}, "account": "\u00a0"}`, s, nil},
		{"empty business key", `{"ref": ""}`, bare, []FieldError{{"ref", "is empty: it forms the job's business key"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := tc.spec.Decode([]byte(tc.body))
			if tc.fields == nil {
				if err != nil {
					t.Fatalf("Decode: %v", err)
				}
				return
			}
			var pe *PayloadError
			if !errors.Is(err, ErrInvalid) || !errors.As(err, &pe) {
				t.Fatalf("Decode error = %v, want a *PayloadError wrapping ErrInvalid", err)
			}
			if !slices.Equal(pe.Fields, tc.fields) {
				t.Errorf("fields =\n%s\nwant\n%s", show(pe.Fields), show(tc.fields))
			}
		})
	}
}

func TestParseTemplateRefusesControlCharacters(t *testing.T) {
	t.Parallel()
	for _, in := range []string{"ship\n:{order_id}", "{a}\t{b}", "{a}\x7f"} {
		if _, err := ParseTemplate(in); err == nil || !strings.Contains(err.Error(), "control character") {
			t.Errorf("ParseTemplate(%q) = %v, want a control character refused", in, err)
		}
	}
}
