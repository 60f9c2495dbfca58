// Package gateway is idemgate's HTTP server: the route table (the longest
// matching path first), the reverse proxy in front of each upstream, the
// enqueue routes and the job API, the admin API, health checks, and the one
// place that turns every error into application/problem+json. The whole
// middleware chain — request id, panic recovery, access log, auth, rate
// limit, idempotency, proxy or enqueue — is built once, in New, from
// Options that cmd/idemgate fills from the configuration file; the gateway
// never reads the file itself (package config is the command's), so tests
// build it the same way (package gateway/gatewaytest runs one in the test
// process).
//
// A proxied route forwards the client's key in canonical form, scoped to
// the tenant ("acme:order-42", unless the route's ForwardKey is as_sent),
// with the claim's Idempotency-Fencing-Token and Idemgate-Tenant, on the
// path it was matched by, and tells the idempotency
// middleware whether a failed call was certainly not processed or
// ambiguous. An enqueue route hands the request to Options.Jobs (an
// *job.Submitter), which validates it against the declared job
// (job.Spec) and queues it; its 202 job document is what retries replay.
// The documents the gateway writes are the models generated in package
// openapi.
//
//	g, err := gateway.New(gateway.Options{Store: pgstore.New(pool), Routes: routes, Auth: authCfg})
//	http.ListenAndServe(":8080", g.Handler())
//	http.ListenAndServe("127.0.0.1:9090", g.AdminHandler())
package gateway
