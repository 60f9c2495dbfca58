// Package auth finds the tenant of a request. In api_key mode the client
// sends "Authorization: Bearer <key>" and the key's SHA-256 is compared, in
// constant time, with every tenant's configured digests; in header mode a
// trusted proxy in front of the gateway names the tenant in a header; in
// none mode every request is tenant "anonymous", which is unsafe when more
// than one client shares the gateway.
//
//	a, err := auth.New(auth.Config{Mode: auth.ModeAPIKey, Tenants: tenants})
//	handler = a.Middleware(onError)(handler)
//	tenant := auth.Tenant(r.Context())
package auth
