package openapi_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"go.yaml.in/yaml/v3"

	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/openapi"
)

// shipmentSchema is a job schema with what real ones use: nested
// objects, $defs (one referred to by its absolute URI), arrays, enums, a
// const, a nullable field and a recursive definition.
const shipmentSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "$id": "https://ship.example/schemas/shipment.json",
  "title": "shipment.book",
  "description": "Books the shipment of an order.",
  "type": "object",
  "additionalProperties": false,
  "required": ["order_id", "quantity"],
  "properties": {
    "order_id": {"type": "string", "minLength": 1, "maxLength": 128},
    "quantity": {"type": "integer", "minimum": 1, "maximum": 1000},
    "speed": {"enum": ["standard", "express"]},
    "address": {"$ref": "#/$defs/address"},
    "parcels": {"type": "array", "maxItems": 3, "items": {"$ref": "https://ship.example/schemas/shipment.json#/$defs/parcel"}},
    "note": {"type": ["string", "null"]},
    "version": {"const": 1},
    "route": {"$ref": "#/$defs/stop"}
  },
  "$defs": {
    "address": {
      "type": "object",
      "additionalProperties": false,
      "required": ["street", "country"],
      "properties": {
        "street": {"type": "string", "minLength": 1},
        "country": {"type": "string", "pattern": "^[A-Z]{2}$"}
      }
    },
    "parcel": {
      "type": "object",
      "required": ["weight_g"],
      "properties": {"weight_g": {"type": "integer", "minimum": 1}, "fragile": {"type": "boolean"}}
    },
    "stop": {
      "type": "object",
      "required": ["city"],
      "properties": {"city": {"type": "string"}, "next": {"$ref": "#/$defs/stop"}}
    }
  }
}`

// pingSchema is the simplest job schema.
const pingSchema = `{"type": "object", "required": ["user_id"], "properties": {"user_id": {"type": "string"}}}`

// sampleRoutes is a configuration with two enqueue routes.
func sampleRoutes() []openapi.JobRoute {
	return []openapi.JobRoute{
		{Name: "shipments", Path: "/v1/shipments", Methods: []string{"POST"}, Task: "shipment.book", Schema: json.RawMessage(shipmentSchema)},
		{Name: "pings", Path: "/v1/pings", Methods: []string{"POST"}, Task: "ping", Schema: json.RawMessage(pingSchema)},
	}
}

func withJobRoutes(t *testing.T, routes []openapi.JobRoute) (yamlDoc, jsonDoc []byte) {
	t.Helper()
	yamlDoc, jsonDoc, err := openapi.WithJobRoutes(openapi.Spec, routes)
	if err != nil {
		t.Fatalf("WithJobRoutes: %v", err)
	}
	return yamlDoc, jsonDoc
}

// TestWithoutJobRoutes: a gateway without enqueue routes serves the
// embedded document as it is.
func TestWithoutJobRoutes(t *testing.T) {
	t.Parallel()
	yamlDoc, jsonDoc := withJobRoutes(t, nil)
	if !bytes.Equal(yamlDoc, openapi.Spec) || !bytes.Equal(jsonDoc, openapi.SpecJSON) {
		t.Error("without routes, the documents are not openapi.Spec and openapi.SpecJSON")
	}
}

// TestServedDocumentDescribesJobRoutes: the served document, as YAML and
// as JSON, is a valid OpenAPI document in which each configured enqueue
// route takes its job's schema and answers with the job document.
func TestServedDocumentDescribesJobRoutes(t *testing.T) {
	t.Parallel()
	yamlDoc, jsonDoc := withJobRoutes(t, sampleRoutes())
	var fromYAML, fromJSON any
	if err := yaml.Unmarshal(yamlDoc, &fromYAML); err != nil {
		t.Fatalf("the YAML document: %v", err)
	}
	if err := json.Unmarshal(jsonDoc, &fromJSON); err != nil {
		t.Fatalf("the JSON document: %v", err)
	}
	if b, err := json.Marshal(fromYAML); err != nil || json.Unmarshal(b, &fromYAML) != nil || !reflect.DeepEqual(fromYAML, fromJSON) {
		t.Errorf("the YAML and the JSON documents differ (%v)", err)
	}

	for name, data := range map[string][]byte{"yaml": yamlDoc, "json": jsonDoc} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			doc := loadDoc(t, data)
			checkOperations(t, doc)
			for path, task := range map[string]string{"/v1/shipments": "shipment.book", "/v1/pings": "ping"} {
				item := doc.Paths.Value(path)
				if item == nil || item.Post == nil || len(item.Operations()) != 1 {
					t.Fatalf("%s: want one operation, POST; got %v", path, item)
				}
				op := item.Post
				if !strings.Contains(op.Summary, task) {
					t.Errorf("POST %s: summary %q does not name task %s", path, op.Summary, task)
				}
				// checkOperations checked the parameters, the responses and
				// that the body is required JSON.
				body := op.RequestBody.Value.Content.Get("application/json").Schema
				if !strings.HasPrefix(body.Ref, "#/components/schemas/") || body.Value == nil {
					t.Errorf("POST %s: the body is %q, want a resolved component", path, body.Ref)
				}
				accepted := op.Responses.Status(http.StatusAccepted).Value
				if accepted.Headers["Location"] == nil || accepted.Content.Get("application/json").Schema.Ref != "#/components/schemas/Job" {
					t.Errorf("POST %s: 202 is not the job document with its Location", path)
				}
			}
			if id := doc.Paths.Value("/v1/shipments").Post.OperationID; id != "enqueueShipments" {
				t.Errorf("operationId %q, want enqueueShipments (from the route's name)", id)
			}

			s := doc.Components.Schemas["ShipmentBook"]
			if s == nil {
				t.Fatal("no component ShipmentBook for task shipment.book")
			}
			if s.Value.Title != "shipment.book" || s.Value.SchemaDialect != "" || s.Value.SchemaID != "" || s.Value.Defs != nil {
				t.Errorf("ShipmentBook keeps $schema %q, $id %q or $defs %v, or lost its title %q",
					s.Value.SchemaDialect, s.Value.SchemaID, s.Value.Defs, s.Value.Title)
			}
			props := s.Value.Properties
			for prop, want := range map[string]string{"address": "ShipmentBookAddress", "route": "ShipmentBookStop"} {
				if p := props[prop]; p == nil || p.Ref != "#/components/schemas/"+want || p.Value == nil {
					t.Errorf("%s: want a resolved $ref to %s, got %+v", prop, want, p)
				}
			}
			if items := props["parcels"].Value.Items; items == nil || items.Ref != "#/components/schemas/ShipmentBookParcel" || items.Value.Properties["weight_g"] == nil {
				t.Errorf("parcels: the absolute $ref is not the parcel component: %+v", items)
			}
			if c := doc.Components.Schemas["ShipmentBookAddress"]; c == nil || c.Value.Properties["country"].Value.Pattern != "^[A-Z]{2}$" {
				t.Error("the address definition is not the component ShipmentBookAddress")
			}
			if next := doc.Components.Schemas["ShipmentBookStop"].Value.Properties["next"]; next.Ref != "#/components/schemas/ShipmentBookStop" {
				t.Errorf("the recursive $ref points at %q", next.Ref)
			}
		})
	}
}

// TestServedSchemaIsTheJobsSchema: a client that validates its request
// against the served document accepts exactly the payloads the gateway
// accepts (job.Schema, which checks them there).
func TestServedSchemaIsTheJobsSchema(t *testing.T) {
	t.Parallel()
	_, jsonDoc := withJobRoutes(t, sampleRoutes())
	doc := loadDoc(t, jsonDoc)
	schema, err := job.CompileSchema([]byte(shipmentSchema), "shipment.json")
	if err != nil {
		t.Fatal(err)
	}
	item := doc.Paths.Value("/v1/shipments")
	op := item.Post
	tests := []struct {
		name, body string
		valid      bool
	}{
		{"the least", `{"order_id":"o-1","quantity":2}`, true},
		{"everything", `{"order_id":"o-1","quantity":2,"speed":"express","address":{"street":"1 Main St","country":"FR"},
			"parcels":[{"weight_g":500,"fragile":true}],"note":null,"version":1,"route":{"city":"Lyon","next":{"city":"Paris"}}}`, true},
		{"a note", `{"order_id":"o-1","quantity":2,"note":"ring twice"}`, true},
		{"no quantity", `{"order_id":"o-1"}`, false},
		{"quantity zero", `{"order_id":"o-1","quantity":0}`, false},
		{"quantity as text", `{"order_id":"o-1","quantity":"2"}`, false},
		{"unknown speed", `{"order_id":"o-1","quantity":2,"speed":"slow"}`, false},
		{"unknown field", `{"order_id":"o-1","quantity":2,"colour":"red"}`, false},
		{"address without country", `{"order_id":"o-1","quantity":2,"address":{"street":"1 Main St"}}`, false},
		{"lower-case country", `{"order_id":"o-1","quantity":2,"address":{"street":"1 Main St","country":"fr"}}`, false},
		{"parcel without weight", `{"order_id":"o-1","quantity":2,"parcels":[{"fragile":true}]}`, false},
		{"four parcels", `{"order_id":"o-1","quantity":2,"parcels":[{"weight_g":1},{"weight_g":1},{"weight_g":1},{"weight_g":1}]}`, false},
		{"note as a number", `{"order_id":"o-1","quantity":2,"note":5}`, false},
		{"another version", `{"order_id":"o-1","quantity":2,"version":2}`, false},
		{"a stop without a city, deep down", `{"order_id":"o-1","quantity":2,"route":{"city":"Lyon","next":{"next":{"city":"Paris"}}}}`, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var data any
			dec := json.NewDecoder(strings.NewReader(tc.body))
			dec.UseNumber()
			if err := dec.Decode(&data); err != nil {
				t.Fatal(err)
			}
			faults := schema.Validate(data)
			if gateway := len(faults) == 0; gateway != tc.valid {
				t.Fatalf("the job's schema says valid=%v (%v), want %v", gateway, faults, tc.valid)
			}
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, "/v1/shipments", strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Idempotency-Key", "k-1")
			err = openapi3filter.ValidateRequest(t.Context(), &openapi3filter.RequestValidationInput{
				Request: req, Route: &routers.Route{Spec: doc, Path: "/v1/shipments", PathItem: item, Method: http.MethodPost, Operation: op},
				Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc},
			})
			if described := err == nil; described != tc.valid {
				t.Errorf("the served description says valid=%v (%v); the gateway says %v", described, err, tc.valid)
			}
		})
	}
}

// TestJobRouteNames: names derived from tasks and route names are stable,
// unique, and never take one of the document's own.
func TestJobRouteNames(t *testing.T) {
	t.Parallel()
	routes := []openapi.JobRoute{
		{Name: "invoices", Path: "/v1/invoices", Methods: []string{"POST"}, Task: "invoice.create", Schema: json.RawMessage(pingSchema)},
		// The same task on a second route: one schema for both.
		{Name: "invoices-v2", Path: "/v2/invoices", Methods: []string{"post", "PUT"}, Task: "invoice.create", Schema: json.RawMessage(pingSchema)},
		// "job" is the document's own Job schema.
		{Name: "job", Path: "/v1/job", Methods: []string{"POST"}, Task: "job", Schema: json.RawMessage(pingSchema)},
		// invoice_create reads as invoice.create once made an identifier,
		// invoices_v2_post as invoices-v2's POST.
		{Name: "invoices_v2_post", Path: "/v3/invoices", Methods: []string{"POST"}, Task: "invoice_create", Schema: json.RawMessage(pingSchema)},
		{Name: "bulk", Path: "/v1/bulk", Prefix: true, Methods: []string{"POST"}, Task: "3d.print", Schema: json.RawMessage(pingSchema)},
	}
	_, jsonDoc := withJobRoutes(t, routes)
	doc := loadDoc(t, jsonDoc)
	for _, want := range []struct{ method, path, operationID, schema string }{
		{"POST", "/v1/invoices", "enqueueInvoices", "InvoiceCreate"},
		{"POST", "/v2/invoices", "enqueueInvoicesV2Post", "InvoiceCreate"},
		{"PUT", "/v2/invoices", "enqueueInvoicesV2Put", "InvoiceCreate"},
		{"POST", "/v1/job", "enqueueJob", "Job2"},
		{"POST", "/v3/invoices", "enqueueInvoicesV2Post2", "InvoiceCreate2"},
		{"POST", "/v1/bulk", "enqueueBulk", "Job3dPrint"},
	} {
		op := doc.Paths.Value(want.path).GetOperation(want.method)
		if op == nil {
			t.Errorf("%s %s is not described", want.method, want.path)
			continue
		}
		if op.OperationID != want.operationID {
			t.Errorf("%s %s: operationId %q, want %q", want.method, want.path, op.OperationID, want.operationID)
		}
		if got := op.RequestBody.Value.Content.Get("application/json").Schema.Ref; got != "#/components/schemas/"+want.schema {
			t.Errorf("%s %s: body %q, want component %s", want.method, want.path, got, want.schema)
		}
	}
	if job := doc.Components.Schemas["Job"].Value; job.Properties["status"] == nil {
		t.Error("the document's own Job schema was replaced")
	}
	if desc := doc.Paths.Value("/v1/bulk").Post.Description; !strings.Contains(desc, "every path below `/v1/bulk/`") {
		t.Errorf("a prefix route's description does not say it takes the paths below it: %q", desc)
	}
}

// TestWithJobRoutesRefuses: a route the document cannot describe is an
// error that names it, never a broken document.
func TestWithJobRoutesRefuses(t *testing.T) {
	t.Parallel()
	route := func(change func(*openapi.JobRoute)) []openapi.JobRoute {
		r := openapi.JobRoute{Name: "shipments", Path: "/v1/shipments", Methods: []string{"POST"}, Task: "shipment.book", Schema: json.RawMessage(pingSchema)}
		change(&r)
		return []openapi.JobRoute{r}
	}
	schema := func(s string) []openapi.JobRoute {
		return route(func(r *openapi.JobRoute) { r.Schema = json.RawMessage(s) })
	}
	tests := []struct {
		name   string
		routes []openapi.JobRoute
		want   string
	}{
		{"the gateway's own path", route(func(r *openapi.JobRoute) { r.Path = "/healthz" }), "gateway's own"},
		{"a template's braces", route(func(r *openapi.JobRoute) { r.Path = "/v1/{x}" }), "path template"},
		{"a relative path", route(func(r *openapi.JobRoute) { r.Path = "v1/shipments" }), "does not start with /"},
		{"no method", route(func(r *openapi.JobRoute) { r.Methods = nil }), "no methods"},
		{"an unknown method", route(func(r *openapi.JobRoute) { r.Methods = []string{"BREW"} }), `"BREW"`},
		{"a method twice", route(func(r *openapi.JobRoute) { r.Methods = []string{"POST", "post"} }), "described twice"},
		{"two routes, one operation", append(route(func(*openapi.JobRoute) {}), route(func(r *openapi.JobRoute) { r.Name = "again" })...), "described twice"},
		{"no task", route(func(r *openapi.JobRoute) { r.Task = "" }), "no task"},
		{"no schema", schema(""), "none given"},
		{"not JSON", schema(`{"type": "object"`), "not a JSON document"},
		{"two documents", schema(`{} {}`), "data after the schema"},
		{"a member twice", schema(`{"type": "object", "type": "string"}`), "appears twice"},
		{"an external $ref", schema(`{"properties": {"a": {"$ref": "other.json#/x"}}}`), "points outside the schema"},
		{"another document than its $id", schema(`{"$id": "https://x.example/a.json", "properties": {"a": {"$ref": "b.json#/x"}}}`), "points outside the schema"},
		{"an unknown definition", schema(`{"properties": {"a": {"$ref": "#/$defs/missing"}}, "$defs": {"b": {}}}`), `no definition "missing"`},
		{"an unknown anchor", schema(`{"properties": {"a": {"$ref": "#nowhere"}}}`), `no $anchor "nowhere"`},
		{"a nested $id", schema(`{"properties": {"a": {"$id": "https://x.example/a.json"}}}`), "nested $id"},
		{"a $dynamicRef", schema(`{"properties": {"a": {"$dynamicRef": "#node"}}}`), "$dynamicRef"},
		{"too deep", schema(strings.Repeat(`{"not": `, 101) + "{}" + strings.Repeat("}", 101)), "nested deeper"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			y, j, err := openapi.WithJobRoutes(openapi.Spec, tc.routes)
			if err == nil {
				t.Fatalf("no error; documents of %d and %d bytes", len(y), len(j))
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), `route "`) {
				t.Errorf("error %q, want it to name the route and say %q", err, tc.want)
			}
		})
	}
}

// TestJobSchemaReferences: every form of $ref a job's schema may use
// inside itself leads to the same place in the served document.
func TestJobSchemaReferences(t *testing.T) {
	t.Parallel()
	const s = `{
	  "$id": "https://ship.example/schemas/order.json",
	  "type": "object",
	  "properties": {
	    "root": {"$ref": "#"},
	    "byAnchor": {"$ref": "#money"},
	    "byPointer": {"$ref": "#/properties/byAnchor"},
	    "byID": {"$ref": "https://ship.example/schemas/order.json#/$defs/money"},
	    "byRelativeID": {"$ref": "order.json#/$defs/money"},
	    "relative": {"$ref": "https://ship.example/schemas/a/../order.json#money"},
	    "escaped": {"$ref": "#/$defs/a~1b%20c"},
	    "draft7": {"$ref": "#/definitions/legacy"},
	    "enum": {"enum": [{"$ref": "#/not/a/reference"}]}
	  },
	  "$defs": {"money": {"$anchor": "money", "type": "integer"}, "a/b c": {"type": "string"}},
	  "definitions": {"legacy": {"type": "boolean"}}
	}`
	_, jsonDoc := withJobRoutes(t, []openapi.JobRoute{{Name: "orders", Path: "/v1/orders", Methods: []string{"POST"}, Task: "order", Schema: json.RawMessage(s)}})
	doc := loadDoc(t, jsonDoc)
	props := doc.Components.Schemas["Order"].Value.Properties
	for prop, want := range map[string]string{
		"root":         "#/components/schemas/Order",
		"byAnchor":     "#/components/schemas/OrderMoney",
		"byPointer":    "#/components/schemas/Order/properties/byAnchor",
		"byID":         "#/components/schemas/OrderMoney",
		"byRelativeID": "#/components/schemas/OrderMoney",
		"relative":     "#/components/schemas/OrderMoney",
		"escaped":      "#/components/schemas/OrderABC",
		"draft7":       "#/components/schemas/OrderLegacy",
	} {
		if p := props[prop]; p == nil || p.Ref != want || p.Value == nil {
			t.Errorf("%s: $ref %q, want %q resolved", prop, refOf(p), want)
		}
	}
	if v := props["enum"].Value.Enum; len(v) != 1 || !reflect.DeepEqual(v[0], map[string]any{"$ref": "#/not/a/reference"}) {
		t.Errorf("a $ref inside enum is data and must stay as written: %v", v)
	}
}

func refOf(r *openapi3.SchemaRef) string {
	if r == nil {
		return "<none>"
	}
	return r.Ref
}

// TestJobSchemaDialect: a schema of the document's own dialect loses
// its $schema, which would only repeat it; one of another dialect keeps
// it, so a reader knows how to read it.
func TestJobSchemaDialect(t *testing.T) {
	t.Parallel()
	for dialect, want := range map[string]string{
		"https://json-schema.org/draft/2020-12/schema":  "",
		"https://json-schema.org/draft/2020-12/schema#": "",
		"http://json-schema.org/draft-07/schema#":       "http://json-schema.org/draft-07/schema#",
	} {
		s := `{"$schema": "` + dialect + `", "type": "object", "properties": {"a": {"type": "string"}}}`
		_, jsonDoc := withJobRoutes(t, []openapi.JobRoute{{Name: "a", Path: "/v1/a", Methods: []string{"POST"}, Task: "a", Schema: json.RawMessage(s)}})
		if got := loadDoc(t, jsonDoc).Components.Schemas["A"].Value.SchemaDialect; got != want {
			t.Errorf("$schema %s is served as %q, want %q", dialect, got, want)
		}
	}
}

// A route's batch path is described as a POST whose items' bodies are the
// job's own schema, bounded by max_items, answered with BatchResult: a
// generated client gets a typed array.
func TestServedDocumentDescribesBatchPaths(t *testing.T) {
	t.Parallel()
	yamlDoc, _, err := openapi.WithJobRoutes(openapi.Spec, []openapi.JobRoute{{
		Name: "shipments", Path: "/v1/shipments", Methods: []string{"POST"}, Task: "shipment.book",
		Schema: json.RawMessage(shipmentSchema), BatchPath: "/v1/shipments:batch", BatchMaxItems: 250,
	}})
	if err != nil {
		t.Fatal(err)
	}
	doc := loadDoc(t, yamlDoc)
	item := doc.Paths.Value("/v1/shipments:batch")
	if item == nil || item.Post == nil {
		t.Fatal("no POST /v1/shipments:batch")
	}
	op := item.Post
	checkEnqueue(t, "POST /v1/shipments:batch", op)
	body := op.RequestBody.Value.Content.Get("application/json").Schema.Value
	items := body.Properties["items"].Value
	if items.MaxItems == nil || *items.MaxItems != 250 {
		t.Errorf("items: maxItems %v, want 250", items.MaxItems)
	}
	if ref := items.Items.Value.Properties["body"].Ref; ref != "#/components/schemas/ShipmentBook" {
		t.Errorf("an item's body is %q, want the job's schema", ref)
	}
	if ref := op.Responses.Value("200").Value.Content.Get("application/json").Schema.Ref; ref != "#/components/schemas/BatchResult" {
		t.Errorf("200 is %q, want BatchResult", ref)
	}
}
