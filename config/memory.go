package config

import (
	"github.com/idemgate/idemgate/middleware/auth"
	"github.com/idemgate/idemgate/middleware/idempotency"
)

// Idempotency is the top-level idempotency block: the middleware's own
// settings, which every route inherits and may override, and the bound of
// the memory store, which is the process's and no route's.
type Idempotency struct {
	idempotency.Config `yaml:",inline"`
	// Memory bounds store: memory. Other stores ignore it.
	Memory Memory `yaml:"memory"`
	// RedisWait, with store: redis, answers a request only once its
	// claim and its completion are on this many replicas
	// (redisstore.WithWait). It is the store's, so no route sets it.
	// Default off.
	RedisWait RedisWait `yaml:"redis_wait"`
}

// Memory configures store: memory.
type Memory struct {
	// MaxBytes bounds what the records hold: keys, fingerprints, stored
	// headers and bodies, and a fixed overhead per record. At the bound
	// a new key is refused with 503 idempotency-store-full; no live
	// record is evicted, and the answer of a request already claimed is
	// stored even past it (memstore.WithMaxBytes). Default
	// DefaultMemoryMaxBytes.
	MaxBytes int64 `yaml:"max_bytes"`
	// MaxBytesPerTenant bounds what one tenant's records hold, counted as
	// MaxBytes counts them. A tenant at its share is refused a new key
	// with 503 idempotency-store-full while the other tenants' new keys
	// are still stored, up to MaxBytes (memstore.WithMaxBytesPerTenant).
	// Default, when absent or 0, MaxBytes divided by the number of
	// tenants, by 4 at most: MaxBytes with auth.mode none or one tenant,
	// MaxBytes/2 with two, MaxBytes/4 with four tenants or more. The
	// special value -1 gives no share: any tenant may fill MaxBytes.
	MaxBytesPerTenant int64 `yaml:"max_bytes_per_tenant"`
}

// withDefaults fills MaxBytes and then MaxBytesPerTenant, a share of it
// for each of tenants (1 to 4).
func (m *Memory) withDefaults(tenants int) {
	if m.MaxBytes == 0 {
		m.MaxBytes = DefaultMemoryMaxBytes
	}
	if m.MaxBytesPerTenant == 0 && m.MaxBytes > 0 {
		m.MaxBytesPerTenant = m.MaxBytes / int64(min(max(tenants, 1), 4))
	}
}

// memoryTenants is how many tenants share the memory store, for the
// default of idempotency.memory.max_bytes_per_tenant: one with auth.mode
// none, the tenants listed otherwise.
func (c *Config) memoryTenants() int {
	if auth.Mode(c.Auth.Mode) == auth.ModeNone {
		return 1
	}
	return len(c.Tenants)
}

func (m Memory) validate(bad badFunc) {
	if m.MaxBytes < 0 {
		bad("idempotency.memory.max_bytes", "must be positive, not %d", m.MaxBytes)
	}
	switch {
	case m.MaxBytesPerTenant < -1:
		bad("idempotency.memory.max_bytes_per_tenant", "must be positive, or -1 for no share, not %d", m.MaxBytesPerTenant)
	case m.MaxBytes > 0 && m.MaxBytesPerTenant > m.MaxBytes:
		bad("idempotency.memory.max_bytes_per_tenant", "%d is more than idempotency.memory.max_bytes, %d", m.MaxBytesPerTenant, m.MaxBytes)
	}
}

// DefaultMemoryMaxBytes is the default of idempotency.memory.max_bytes:
// 128 MiB.
const DefaultMemoryMaxBytes = 128 << 20
