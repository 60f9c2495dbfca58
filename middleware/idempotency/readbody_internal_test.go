package idempotency

import (
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// TestReadAtMost: the body read for the fingerprint is the body sent, up
// to the limit plus one byte (so a body over the limit shows as one),
// whatever length the request declared.
func TestReadAtMost(t *testing.T) {
	t.Parallel()
	const max = 11 // a limit of 10 bytes, plus the byte that shows it is exceeded
	tests := []struct {
		name     string
		body     string
		declared int64
		want     string
	}{
		{"declared exactly", "0123456789", 10, "0123456789"},
		{"shorter than declared", "01234", 10, "01234"},
		{"longer than declared", "0123456789", 4, "0123456789"},
		{"longer than declared and the limit", "0123456789abcdef", 4, "0123456789a"},
		{"unknown length", "0123456789abcdef", -1, "0123456789a"},
		{"declared over the limit", "0123456789abcdef", 16, "0123456789a"},
		{"empty", "", 0, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// One byte a read, as a slow client sends it.
			got, err := readAtMost(iotest.OneByteReader(strings.NewReader(tc.body)), tc.declared, max)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("read %q, want %q", got, tc.want)
			}
		})
	}
	t.Run("read error", func(t *testing.T) {
		t.Parallel()
		broken := errors.New("connection reset")
		r := io.MultiReader(strings.NewReader("0123"), iotest.ErrReader(broken))
		if _, err := readAtMost(r, 10, max); !errors.Is(err, broken) {
			t.Errorf("err %v, want %v", err, broken)
		}
	})
}
