// Package apiclient is the typed Go client of the gateway's own HTTP API,
// generated from openapi.yaml with oapi-codegen (apiclient.gen.go, made by
// `go generate ./openapi`): one method per operation of the description,
// each in a plain form (the *http.Response) and a WithResponse form that
// decodes every documented answer into the models of package openapi.
// It retries nothing and picks no Idempotency-Key: it is the description
// as Go. For producing jobs and calls that are safe to retry, use package
// client, the producer SDK, which chooses the key once and retries with
// it.
//
//	c, err := apiclient.NewClientWithResponses("http://127.0.0.1:8080")
//	job, err := c.GetJobWithResponse(ctx, "job_…", nil)
//	// job.JSON200 is an *openapi.Job
package apiclient
