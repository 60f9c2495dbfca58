// Package memstore is an in-process idempotency.Store for tests and for
// library users with a single process. Records live in a map guarded by a
// mutex; nothing survives a restart, and two processes never see each
// other's records, so it is no protection across gateway instances.
//
//	store := memstore.New()
//	mw, err := idempotency.New(store, idempotency.Config{Route: "payments"})
package memstore
