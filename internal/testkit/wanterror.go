package testkit

import (
	"strings"
	"testing"
)

// WantError checks the error a call named what returned against want, the
// pieces its message must contain; with none, the call must have
// succeeded. It reports whether there was an error, for a caller that
// goes on to check more of it.
func WantError(t testing.TB, what string, err error, want []string) bool {
	t.Helper()
	if len(want) == 0 {
		if err != nil {
			t.Fatalf("%s: %v, want nil", what, err)
		}
		return false
	}
	if err == nil {
		t.Fatalf("%s: nil, want an error mentioning %q", what, want)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s: %q lacks %q", what, err, w)
		}
	}
	return true
}
