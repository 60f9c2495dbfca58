package config

import "github.com/idemgate/idemgate/middleware/idempotency"

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
}

// DefaultMemoryMaxBytes is the default of idempotency.memory.max_bytes:
// 128 MiB.
const DefaultMemoryMaxBytes = 128 << 20
