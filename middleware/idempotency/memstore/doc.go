// Package memstore is an in-process idempotency.Store for tests and for
// library users with a single process. Records live in a map guarded by a
// mutex; nothing survives a restart, and two processes never see each
// other's records, so it is no protection across gateway instances.
// WithMaxBytes bounds what it holds: past the bound a new key is refused
// (idempotency.ErrStoreFull) and no live record is ever evicted.
// WithMaxBytesPerTenant gives each tenant a share of it, so that one
// tenant filling its share leaves room for the others' new keys. The
// janitor (DeleteExpired) takes expired records off a heap ordered by
// expiry, so a pass costs what it deletes, not what the store holds.
//
//	store := memstore.New(memstore.WithMaxBytes(128<<20), memstore.WithMaxBytesPerTenant(32<<20))
//	mw, err := idempotency.New(store, idempotency.Config{Route: "payments"})
package memstore
