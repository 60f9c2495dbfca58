package config

import (
	"fmt"
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
			cfg := parseOrRefuse(t, tc.yaml, tc.err)
			if cfg == nil {
				return
			}
			if got := cfg.Idempotency.Memory.MaxBytes; got != tc.want {
				t.Errorf("idempotency.memory.max_bytes = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestMemoryMaxBytesPerTenant(t *testing.T) {
	t.Parallel()
	const (
		store  = "store: memory\nadmin_listen: \"\"\n"
		tenant = "  - name: t%d\n    api_key_sha256: [\"%064d\"]\n"
	)
	tenants := func(n int) string {
		s := "tenants:\n"
		for i := range n {
			s += fmt.Sprintf(tenant, i, i)
		}
		return s
	}
	for _, tc := range []struct {
		name, yaml string
		want       int64
		err        string // a whole line of the error
	}{
		{name: "auth none", yaml: store + "auth: {mode: none}\n", want: DefaultMemoryMaxBytes},
		{name: "one tenant", yaml: store + tenants(1), want: DefaultMemoryMaxBytes},
		{name: "two tenants", yaml: store + tenants(2), want: DefaultMemoryMaxBytes / 2},
		{name: "six tenants", yaml: store + tenants(6), want: DefaultMemoryMaxBytes / 4},
		{name: "of max_bytes", yaml: store + tenants(6) + "idempotency:\n  memory: {max_bytes: 1048576}\n", want: 1 << 18},
		{name: "written", yaml: store + tenants(6) + "idempotency:\n  memory: {max_bytes_per_tenant: 1000}\n", want: 1000},
		{name: "no share", yaml: store + tenants(6) + "idempotency:\n  memory: {max_bytes_per_tenant: -1}\n", want: -1},
		{name: "below -1", yaml: store + tenants(1) + "idempotency:\n  memory: {max_bytes_per_tenant: -2}\n",
			err: "idempotency.memory.max_bytes_per_tenant: must be positive, or -1 for no share, not -2"},
		{name: "past max_bytes", yaml: store + tenants(1) + "idempotency:\n  memory: {max_bytes: 1000, max_bytes_per_tenant: 2000}\n",
			err: "idempotency.memory.max_bytes_per_tenant: 2000 is more than idempotency.memory.max_bytes, 1000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := parseOrRefuse(t, tc.yaml, tc.err)
			if cfg == nil {
				return
			}
			if got := cfg.Idempotency.Memory.MaxBytesPerTenant; got != tc.want {
				t.Errorf("idempotency.memory.max_bytes_per_tenant = %d, want %d", got, tc.want)
			}
		})
	}
}
