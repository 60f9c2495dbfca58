// Package openapi holds the OpenAPI 3.1 description of everything the
// gateway itself serves, embedded so `GET /openapi.yaml` always matches the
// binary, the same document as JSON for `GET /openapi.json`, and the models
// generated from it (openapi.gen.go; the typed client is in package
// client). Regenerate both with `go generate ./openapi/...`. The gateway
// encodes the documents it writes itself from these models, so what it
// serves is what the description says; this package must therefore never
// import the gateway.
//
// Enqueue routes are configuration, so openapi.yaml lists none: the
// gateway serves the document WithJobRoutes returns, which adds a path
// item per configured enqueue route whose request body is the job's own
// JSON Schema. OpenAPI 3.1 schemas are JSON Schema 2020-12, the dialect
// jobs are declared in, so a job's schema is embedded as written.
//
//	yamlDoc, jsonDoc, err := openapi.WithJobRoutes(openapi.Spec, []openapi.JobRoute{
//		{Name: "shipments", Path: "/v1/shipments", Methods: []string{"POST"}, Task: "shipment.book", Schema: schema},
//	})
package openapi

import (
	_ "embed"
)

//go:generate go tool oapi-codegen -config codegen-models.yaml -o openapi.gen.go openapi.yaml
//go:generate go tool oapi-codegen -config codegen-client.yaml -o apiclient/apiclient.gen.go openapi.yaml

// Spec is openapi.yaml: the gateway's own endpoints and the components
// every enqueue and proxied route refers to, without any enqueue route.
//
//go:embed openapi.yaml
var Spec []byte

// SpecJSON is Spec as indented JSON, its keys in the order openapi.yaml
// writes them. It is converted when the package loads, so it cannot drift
// from Spec.
var SpecJSON = mustJSON(Spec)

func mustJSON(doc []byte) []byte {
	b, err := yamlToJSON(doc)
	if err != nil {
		panic("openapi: openapi.yaml: " + err.Error())
	}
	return b
}
