package idempotency_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/problem"
)

func TestParseKey(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("k", 255)
	tests := []struct {
		name   string
		values []string
		syntax idempotency.KeySyntax
		want   string
		err    error
	}{
		{"no header", nil, idempotency.KeyCompat, "", idempotency.ErrKeyMissing},
		{"quoted compat", []string{`"abc-123"`}, idempotency.KeyCompat, "abc-123", nil},
		{"quoted strict", []string{`"abc-123"`}, idempotency.KeyStrict, "abc-123", nil},
		{"bare compat", []string{"abc-123"}, idempotency.KeyCompat, "abc-123", nil},
		{"uuid bare", []string{"8e03978e-40d5-43e8-bc93-6894a57f9324"}, idempotency.KeyCompat, "8e03978e-40d5-43e8-bc93-6894a57f9324", nil},
		{"surrounding white space", []string{" \t\"abc\"  "}, idempotency.KeyStrict, "abc", nil},
		{"quoted with space and comma", []string{`"a b,c"`}, idempotency.KeyStrict, "a b,c", nil},
		{"escaped quote and backslash", []string{`"a\"b\\c"`}, idempotency.KeyStrict, `a"b\c`, nil},
		{"bare with punctuation", []string{"order#42;v=1"}, idempotency.KeyCompat, "order#42;v=1", nil},
		{"max length", []string{long}, idempotency.KeyCompat, long, nil},
		{"bare in strict", []string{"abc"}, idempotency.KeyStrict, "", idempotency.ErrKeyInvalid},
		{"empty value", []string{""}, idempotency.KeyCompat, "", idempotency.ErrKeyInvalid},
		{"only spaces", []string{"   "}, idempotency.KeyCompat, "", idempotency.ErrKeyInvalid},
		{"empty quoted", []string{`""`}, idempotency.KeyCompat, "", idempotency.ErrKeyInvalid},
		{"repeated header", []string{`"a"`, `"a"`}, idempotency.KeyCompat, "", idempotency.ErrKeyInvalid},
		{"list quoted", []string{`"a", "b"`}, idempotency.KeyCompat, "", idempotency.ErrKeyInvalid},
		{"list bare", []string{"a,b"}, idempotency.KeyCompat, "", idempotency.ErrKeyInvalid},
		{"parameters", []string{`"a";x=1`}, idempotency.KeyStrict, "", idempotency.ErrKeyInvalid},
		{"junk after quote", []string{`"a"b`}, idempotency.KeyStrict, "", idempotency.ErrKeyInvalid},
		{"unterminated", []string{`"abc`}, idempotency.KeyCompat, "", idempotency.ErrKeyInvalid},
		{"bad escape", []string{`"a\nb"`}, idempotency.KeyCompat, "", idempotency.ErrKeyInvalid},
		{"trailing backslash", []string{`"a\`}, idempotency.KeyCompat, "", idempotency.ErrKeyInvalid},
		{"control char quoted", []string{"\"a\x01b\""}, idempotency.KeyCompat, "", idempotency.ErrKeyInvalid},
		{"non-ascii quoted", []string{`"ключ"`}, idempotency.KeyCompat, "", idempotency.ErrKeyInvalid},
		{"non-ascii bare", []string{"ключ"}, idempotency.KeyCompat, "", idempotency.ErrKeyInvalid},
		{"bare inner space", []string{"a b"}, idempotency.KeyCompat, "", idempotency.ErrKeyInvalid},
		{"bare inner quote", []string{`a"b`}, idempotency.KeyCompat, "", idempotency.ErrKeyInvalid},
		{"bare tab", []string{"a\tb"}, idempotency.KeyCompat, "", idempotency.ErrKeyInvalid},
		{"too long", []string{long + "k"}, idempotency.KeyCompat, "", idempotency.ErrKeyInvalid},
		{"too long quoted", []string{`"` + long + `k"`}, idempotency.KeyStrict, "", idempotency.ErrKeyInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := idempotency.ParseKey(tc.values, tc.syntax, 255)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("ParseKey(%q) error = %v, want %v", tc.values, err, tc.err)
				}
				var re *problem.Error
				if tc.err == idempotency.ErrKeyInvalid && (!errors.As(err, &re) || re.Detail == "") {
					t.Fatalf("ParseKey(%q): invalid key without a detail for the client: %v", tc.values, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ParseKey(%q) = %q, %v; want %q", tc.values, got, err, tc.want)
			}
		})
	}
}

// FuzzParseKey checks that an accepted key is within bounds and that its
// quoted form parses back to the same key in both syntaxes.
func FuzzParseKey(f *testing.F) {
	for _, s := range []string{`"abc"`, "abc", `"a\"b"`, `"a", "b"`, "", `"`, `\`, "a,b", `"a";p`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		for _, syntax := range []idempotency.KeySyntax{idempotency.KeyStrict, idempotency.KeyCompat} {
			key, err := idempotency.ParseKey([]string{v}, syntax, 64)
			if err != nil {
				if !errors.Is(err, idempotency.ErrKeyInvalid) {
					t.Fatalf("ParseKey(%q) returned %v, not ErrKeyInvalid", v, err)
				}
				continue
			}
			if len(key) == 0 || len(key) > 64 {
				t.Fatalf("ParseKey(%q) accepted a key of %d bytes", v, len(key))
			}
			quoted := `"` + strings.ReplaceAll(strings.ReplaceAll(key, `\`, `\\`), `"`, `\"`) + `"`
			again, err := idempotency.ParseKey([]string{quoted}, idempotency.KeyStrict, 64)
			if err != nil || again != key {
				t.Fatalf("key %q from %q: quoted form %q parses to %q, %v", key, v, quoted, again, err)
			}
		}
	})
}
