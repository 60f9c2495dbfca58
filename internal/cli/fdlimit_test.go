package cli

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// TestMaxInFlightFitsTheOpenFileLimit: a max_in_flight the descriptors
// cannot carry is lowered, and the operator told why; one they can carry,
// or an unknown limit, leaves it alone.
func TestMaxInFlightFitsTheOpenFileLimit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		configured int
		nofile     uint64
		want       int
		warns      bool
	}{
		{"plenty", 4096, 1 << 20, 4096, false},
		{"just enough", 3000, 8000, 3000, false},
		{"too few", 4096, 1024, 384, true},
		{"unknown", 4096, 0, 4096, false},
		{"unlimited", 4096, ^uint64(0), 4096, false},
		{"one", 4096, 1, 1, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var log bytes.Buffer
			got := maxInFlight(tc.configured, tc.nofile, slog.New(slog.NewTextHandler(&log, nil)))
			if got != tc.want {
				t.Errorf("maxInFlight(%d, %d) = %d, want %d", tc.configured, tc.nofile, got, tc.want)
			}
			if warned := strings.Contains(log.String(), "server.max_in_flight lowered"); warned != tc.warns {
				t.Errorf("warned %v, want %v: %s", warned, tc.warns, log.String())
			}
		})
	}
}
