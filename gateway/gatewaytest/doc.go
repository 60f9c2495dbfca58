// Package gatewaytest runs an idemgate gateway in the test process, for
// the tests of the gateway, of its OpenAPI description and of the
// generated client: a memory idempotency store, an in-memory job queue
// that validates payloads like the real one, the example enqueue routes of
// deploy/local/idemgate.yaml with the example jobs' schemas, three
// tenants and an admin token; it serves the description of those routes
// that openapi.WithJobRoutes makes (Documents). Change the Options before
// Start to add routes or swap the store. A Validator checks any gateway's
// answers, this one's or a real one's, against that description.
//
// It lives beside the gateway, not beside the description: package openapi
// describes the API and imports nothing of the product.
//
//	opts := gatewaytest.Options(gatewaytest.NewQueue(), memstore.New())
//	srv := gatewaytest.Start(t, opts)
//	resp, err := http.Post(srv.Public.URL+"/v1/invoices", …)
//	v, err := gatewaytest.NewValidator(ctx, nil)
//	err = v.Validate(ctx, resp, body)
package gatewaytest
