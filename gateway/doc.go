// Package gateway is idemgate's HTTP server: the route table (the longest
// matching path first), the reverse proxy in front of each upstream, the
// enqueue routes and the job API, the admin API, health checks, and the one
// place that turns every error into application/problem+json. The whole
// middleware chain — request id, panic recovery, access log, auth, rate
// limit, idempotency, proxy or enqueue — is built once, in New, from
// Options that cmd/idemgate fills from the configuration file.
//
//	g, err := gateway.New(gateway.Options{Store: pgstore.New(pool), Routes: routes, Auth: authCfg})
//	http.ListenAndServe(":8080", g.Handler())
//	http.ListenAndServe("127.0.0.1:9090", g.AdminHandler())
package gateway
