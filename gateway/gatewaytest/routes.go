package gatewaytest

import (
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

// The example jobs' schemas, as examples/schemas declares them.
const (
	invoiceSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "title": "invoice.create",
  "description": "Creates the one invoice of an order.",
  "type": "object",
  "additionalProperties": false,
  "required": ["order_id", "amount_cents", "currency"],
  "properties": {
    "order_id": {"type": "string", "minLength": 1, "maxLength": 128, "pattern": "^[^:\\s]*$"},
    "amount_cents": {"type": "integer", "minimum": 1},
    "currency": {"type": "string", "pattern": "^[A-Z]{3}$", "description": "ISO 4217 code, like EUR"}
  }
}`
	inventorySchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "title": "inventory.adjust",
  "description": "Applies one stock movement, once per adjustment id.",
  "type": "object",
  "additionalProperties": false,
  "required": ["adjustment_id", "sku", "delta"],
  "properties": {
    "adjustment_id": {"type": "string", "minLength": 1, "maxLength": 128, "pattern": "^[^:\\s]*$"},
    "sku": {"type": "string", "minLength": 1, "maxLength": 128, "pattern": "^[^:\\s]*$"},
    "delta": {"type": "integer", "not": {"const": 0}}
  }
}`
	chargeSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "title": "payment.charge",
  "description": "Charges a payment at the partner, once.",
  "type": "object",
  "additionalProperties": false,
  "required": ["payment_id", "amount_cents", "currency"],
  "properties": {
    "payment_id": {"type": "string", "minLength": 1, "maxLength": 128, "pattern": "^[^:\\s]*$"},
    "amount_cents": {"type": "integer", "minimum": 1},
    "currency": {"type": "string", "pattern": "^[A-Z]{3}$", "description": "ISO 4217 code, like EUR"}
  }
}`
	notificationSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "title": "notification.send",
  "description": "Sends one message per (template, user, event).",
  "type": "object",
  "additionalProperties": false,
  "required": ["event_id", "user_id", "template"],
  "properties": {
    "event_id": {"type": "string", "minLength": 1, "maxLength": 128, "pattern": "^[^:\\s]*$"},
    "user_id": {"type": "string", "minLength": 1, "maxLength": 128, "pattern": "^[^:\\s]*$"},
    "template": {"type": "string", "minLength": 1, "maxLength": 128, "pattern": "^[^:\\s]*$"}
  }
}`
	shipmentSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "title": "shipment.book",
  "description": "Books the shipment of an order at the shipping service, once.",
  "type": "object",
  "additionalProperties": false,
  "required": ["order_id", "quantity"],
  "properties": {
    "order_id": {"type": "string", "minLength": 1, "maxLength": 128, "pattern": "^[^:\\s]*$"},
    "quantity": {"type": "integer", "minimum": 1, "maximum": 1000}
  }
}`
)

// EnqueueRoutes returns the example enqueue routes: route name, path,
// task and job declaration.
func EnqueueRoutes() []EnqueueRoute {
	return []EnqueueRoute{
		{"invoices", "/v1/invoices", "invoice.create", json.RawMessage(invoiceSchema), "invoice:{order_id}", "order:{order_id}"},
		{"inventory", "/v1/inventory/adjustments", "inventory.adjust", json.RawMessage(inventorySchema), "inventory:{adjustment_id}", "sku:{sku}"},
		{"charges", "/v1/payments/charges", "payment.charge", json.RawMessage(chargeSchema), "payment:{payment_id}", "payment:{payment_id}"},
		{"notifications", "/v1/notifications", "notification.send", json.RawMessage(notificationSchema), "email:{template}:{user_id}:{event_id}", "user:{user_id}"},
		{"shipments", "/v1/shipments", "shipment.book", json.RawMessage(shipmentSchema), "shipment:{order_id}", "order:{order_id}"},
	}
}

// Spec compiles r's job declaration. The declarations are this package's
// own constants, so a failure is a bug here: it panics.
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
