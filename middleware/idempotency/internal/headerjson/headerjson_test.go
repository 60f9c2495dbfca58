package headerjson

import (
	"encoding/json"
	"net/http"
	"testing"
)

// What the stores wrote before must read back the same: Append is
// json.Marshal, byte for byte.
func check(t *testing.T, h http.Header) {
	t.Helper()
	want, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	if got := Append(nil, h); string(got) != string(want) {
		t.Fatalf("Append(%q)\n got %s\nwant %s", h, got, want)
	}
}

func TestAppendIsMarshal(t *testing.T) {
	t.Parallel()
	for name, h := range map[string]http.Header{
		"nil":      nil,
		"empty":    {},
		"typical":  {"Content-Type": {"application/json"}, "Location": {"/v1/payments/pay_1"}, "Set-Cookie": {"a=1", "b=2"}},
		"nil list": {"X-Empty": nil, "X-None": {}},
		"escapes":  {"X-Q": {"\"quoted\" \\ back", "<b>&amp;</b>", "tab\there\nnl\r\x00\x1f\x7f"}},
		"unicode":  {"X-U": {"é ü 日本 \u2028 \u2029 😀"}},
		"invalid":  {"X-Bad": {"\xff\xfe ok \xc3", "\xed\xa0\x80"}},
		"many": {"A": {"1"}, "B": {"2"}, "C": {"3"}, "D": {"4"}, "E": {"5"}, "F": {"6"}, "G": {"7"}, "H": {"8"},
			"I": {"9"}, "J": {"10"}, "K": {"11"}, "L": {"12"}, "M": {"13"}, "N": {"14"}, "O": {"15"}, "P": {"16"}, "Q": {"17"}},
	} {
		t.Run(name, func(t *testing.T) { check(t, h) })
	}
}

func FuzzAppend(f *testing.F) {
	f.Add("Content-Type", "application/json", "x")
	f.Add("X-\u2028", "<\xff>", "\"\\")
	f.Fuzz(func(t *testing.T, k, v1, v2 string) {
		check(t, http.Header{k: {v1, v2}, "Z" + k: {v2}})
	})
}

func BenchmarkAppend(b *testing.B) {
	h := http.Header{"Content-Type": {"application/json"}, "Location": {"/v1/payments/pay_1"}, "Date": {"Wed, 02 Dec 2026 10:00:00 GMT"}}
	b.Run("headerjson", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = Append(make([]byte, 0, Size(h)), h)
		}
	})
	b.Run("json.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = json.Marshal(h)
		}
	})
}
