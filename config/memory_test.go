package config

import (
	"strings"
	"testing"
)

func TestMemoryMaxBytes(t *testing.T) {
	t.Parallel()
	const base = "store: memory\nadmin_listen: \"\"\nauth: {mode: none}\n"
	for _, tc := range []struct {
		name, yaml string
		want       int64
		err        string // a whole line of the error
	}{
		{name: "default", yaml: base, want: DefaultMemoryMaxBytes},
		{name: "written", yaml: base + "idempotency:\n  retention: 1h\n  memory:\n    max_bytes: 1048576\n", want: 1 << 20},
		{name: "negative", yaml: base + "idempotency:\n  memory:\n    max_bytes: -1\n",
			err: "x.yaml:6: idempotency.memory.max_bytes: must be positive, not -1"},
		{name: "misspelt", yaml: base + "idempotency:\n  memory:\n    max_byte: 10\n",
			err: `x.yaml:6: idempotency.memory.max_byte: unknown key; did you mean "max_bytes"?`},
		{name: "not a route's", yaml: base + "routes:\n  - name: r\n    path: /r\n    upstream: http://u\n    idempotency:\n      memory: {max_bytes: 10}\n",
			err: "routes[0].idempotency.memory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := Parse([]byte(tc.yaml), "x.yaml", func(string) string { return "" })
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want a line %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if got := cfg.Idempotency.Memory.MaxBytes; got != tc.want {
				t.Errorf("idempotency.memory.max_bytes = %d, want %d", got, tc.want)
			}
		})
	}
}
