package gatewaytest

import (
	"embed"
	"encoding/json"

	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/openapi"
)

// EnqueueRoute is one of the example enqueue routes of
// deploy/local/idemgate.yaml and the job it submits, declared as there.
type EnqueueRoute struct {
	Name, Path string
	Task       string
	// Schema is the job's JSON Schema; BusinessKey and Resource its
	// templates.
	Schema                json.RawMessage
	BusinessKey, Resource string
}

// EnqueueRoutes returns the example enqueue routes: route name, path,
// task and job declaration.
func EnqueueRoutes() []EnqueueRoute {
	return []EnqueueRoute{
		{"invoices", "/v1/invoices", "invoice.create", exampleSchema("invoice.create"), "invoice:{order_id}", "order:{order_id}"},
		{"inventory", "/v1/inventory/adjustments", "inventory.adjust", exampleSchema("inventory.adjust"), "inventory:{adjustment_id}", "sku:{sku}"},
		{"charges", "/v1/payments/charges", "payment.charge", exampleSchema("payment.charge"), "payment:{payment_id}", "payment:{payment_id}"},
		{"notifications", "/v1/notifications", "notification.send", exampleSchema("notification.send"), "email:{template}:{user_id}:{event_id}", "user:{user_id}"},
		{"shipments", "/v1/shipments", "shipment.book", exampleSchema("shipment.book"), "shipment:{order_id}", "order:{order_id}"},
	}
}

// exampleSchema is the schema of task as this package keeps it: a copy
// of examples/schemas' (TestSchemasAreTheExamples keeps them equal). A
// missing one is a bug in this package: it panics.
func exampleSchema(task string) json.RawMessage {
	doc, err := schemaFiles.ReadFile("schemas/" + task + ".json")
	if err != nil {
		panic("gatewaytest: " + err.Error())
	}
	return doc
}

//go:embed schemas/*.json
var schemaFiles embed.FS

// Spec compiles r's job declaration. The declarations are this package's
// own and the example schemas, so a failure is a bug here: it panics.
func (r EnqueueRoute) Spec() *job.Spec {
	spec, err := job.NewSpec(r.Task, r.Schema, r.BusinessKey, r.Resource)
	if err != nil {
		panic("gatewaytest: " + err.Error())
	}
	return spec
}

// JobRoute is how the served description sees r.
func (r EnqueueRoute) JobRoute() openapi.JobRoute {
	return openapi.JobRoute{Name: r.Name, Path: r.Path, Methods: []string{"POST"}, Task: r.Task, Schema: r.Schema}
}

// Documents returns what the gateway of Options serves at /openapi.yaml
// and /openapi.json: openapi.Spec with the example enqueue routes.
func Documents() (yamlDoc, jsonDoc []byte) {
	var routes []openapi.JobRoute
	for _, r := range EnqueueRoutes() {
		routes = append(routes, r.JobRoute())
	}
	yamlDoc, jsonDoc, err := openapi.WithJobRoutes(openapi.Spec, routes)
	if err != nil {
		panic("gatewaytest: " + err.Error())
	}
	return yamlDoc, jsonDoc
}
