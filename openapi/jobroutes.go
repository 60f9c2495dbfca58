package openapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode"

	"go.yaml.in/yaml/v3"
)

// JobRoute is one configured enqueue route, as the served document
// describes it.
type JobRoute struct {
	// Name is the route's name; the operationId is derived from it.
	Name string
	// Path is the route's exact path, or its prefix when Prefix is set.
	Path string
	// Prefix: the route takes every path below Path too. Only Path
	// itself is described, with a note saying so.
	Prefix bool
	// Methods are the route's methods, usually [POST].
	Methods []string
	// Task is the job's task.
	Task string
	// Schema is the job's JSON Schema (2020-12), as declared.
	Schema json.RawMessage
	// BatchPath, when set, is the route's batch path (routes[].batch),
	// described as a POST whose items' bodies are the job's schema;
	// BatchMaxItems is its max_items.
	BatchPath     string
	BatchMaxItems int
}

// WithJobRoutes returns the documents the gateway serves at
// /openapi.yaml and /openapi.json: base (openapi.yaml) with a path item
// per enqueue route, whose request body is the job's schema (a component
// named after the task: shipment.book is ShipmentBook) and whose 202 is
// the job document. Without routes they are base and its JSON, byte for
// byte. It fails when a route cannot be described: a path that is
// already in base or holds a template's braces, a method given twice for
// one path, or a schema that is not JSON or refers outside itself.
func WithJobRoutes(base []byte, routes []JobRoute) (yamlDoc, jsonDoc []byte, err error) {
	if len(routes) == 0 {
		jsonDoc, err := yamlToJSON(base)
		if err != nil {
			return nil, nil, fmt.Errorf("openapi: base document: %w", err)
		}
		return base, jsonDoc, nil
	}
	var root yaml.Node
	if err := yaml.Unmarshal(base, &root); err != nil {
		return nil, nil, fmt.Errorf("openapi: base document: %w", err)
	}
	d, err := newDocument(&root)
	if err != nil {
		return nil, nil, fmt.Errorf("openapi: base document: %w", err)
	}
	for _, r := range routes {
		if err := d.addRoute(r); err != nil {
			return nil, nil, fmt.Errorf("openapi: route %q: %w", r.Name, err)
		}
	}
	d.insert()

	var out bytes.Buffer
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	if err := enc.Encode(&root); err != nil {
		return nil, nil, fmt.Errorf("openapi: encode YAML: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, nil, fmt.Errorf("openapi: encode YAML: %w", err)
	}
	if jsonDoc, err = nodeToJSON(&root); err != nil {
		return nil, nil, fmt.Errorf("openapi: encode JSON: %w", err)
	}
	return out.Bytes(), jsonDoc, nil
}

// The components every enqueue operation refers to; base must have them.
var enqueueRefs = []string{
	"parameters/IdempotencyKey", "parameters/RequestID", "parameters/ScheduleDelay", "parameters/ScheduleNotBefore", "securitySchemes/apiKey",
	"responses/JobAccepted", "responses/BadRequest", "responses/Unauthorized", "responses/Conflict",
	"responses/RequestTooLarge", "responses/UnprocessableEntity", "responses/RateLimited",
	"responses/InternalError", "responses/ServiceUnavailable",
}

// document is base being extended with enqueue routes.
type document struct {
	paths, schemas *yaml.Node
	// Added, in the order the routes name them.
	newPaths   []string
	items      map[string]*yaml.Node
	components []component
	// Tasks already described, with their component.
	taskSchema   map[string]string
	schemaNames  *namer
	operationIDs *namer
}

func newDocument(root *yaml.Node) (*document, error) {
	if root.Kind != yaml.DocumentNode || len(root.Content) != 1 {
		return nil, errors.New("not one YAML document")
	}
	top := root.Content[0]
	components := lookup(top, "components")
	d := &document{
		paths:        lookup(top, "paths"),
		schemas:      lookup(components, "schemas"),
		items:        map[string]*yaml.Node{},
		taskSchema:   map[string]string{},
		schemaNames:  &namer{taken: map[string]bool{}},
		operationIDs: &namer{taken: map[string]bool{}},
	}
	if d.paths == nil || d.paths.Kind != yaml.MappingNode || d.schemas == nil || d.schemas.Kind != yaml.MappingNode {
		return nil, errors.New("no paths or no components.schemas")
	}
	for _, r := range enqueueRefs {
		kind, name, _ := strings.Cut(r, "/")
		if lookup(lookup(components, kind), name) == nil {
			return nil, fmt.Errorf("no components.%s.%s, which enqueue routes refer to", kind, name)
		}
	}
	for i := 0; i+1 < len(d.schemas.Content); i += 2 {
		d.schemaNames.taken[d.schemas.Content[i].Value] = true
	}
	for i := 0; i+1 < len(d.paths.Content); i += 2 {
		item := d.paths.Content[i+1]
		for j := 0; j+1 < len(item.Content); j += 2 {
			if id := lookup(item.Content[j+1], "operationId"); id != nil {
				d.operationIDs.taken[id.Value] = true
			}
		}
	}
	return d, nil
}

// httpMethods are the methods a path item can hold.
var httpMethods = []string{"GET", "PUT", "POST", "DELETE", "OPTIONS", "HEAD", "PATCH", "TRACE"}

func (d *document) addRoute(r JobRoute) error {
	switch {
	case !strings.HasPrefix(r.Path, "/"):
		return fmt.Errorf("path %q does not start with /", r.Path)
	case strings.ContainsAny(r.Path, "{}"):
		// OpenAPI would read {…} as a path parameter the route does not have.
		return fmt.Errorf("path %q holds { or }, which OpenAPI reads as a path template", r.Path)
	case lookup(d.paths, r.Path) != nil:
		return fmt.Errorf("path %s is one of the gateway's own", r.Path)
	case len(r.Methods) == 0:
		return errors.New("no methods")
	case r.Task == "":
		return errors.New("no task")
	}
	schema, err := d.describeTask(r.Task, r.Schema)
	if err != nil {
		return fmt.Errorf("job %q: schema: %w", r.Task, err)
	}
	item := d.items[r.Path]
	if item == nil {
		item = mapping()
		d.items[r.Path] = item
		d.newPaths = append(d.newPaths, r.Path)
	}
	for _, m := range r.Methods {
		method := strings.ToUpper(m)
		if !slices.Contains(httpMethods, method) {
			return fmt.Errorf("method %q cannot be described", m)
		}
		key := strings.ToLower(method)
		if lookup(item, key) != nil {
			return fmt.Errorf("%s %s is described twice (two routes, or a method listed twice)", method, r.Path)
		}
		id := "enqueue" + pascal(r.Name)
		if len(r.Methods) > 1 {
			id += pascal(key)
		}
		item.Content = append(item.Content, str(key), enqueueOperation(r, d.operationIDs.take(id), schema))
	}
	if r.BatchPath == "" {
		return nil
	}
	switch {
	case !strings.HasPrefix(r.BatchPath, "/"):
		return fmt.Errorf("batch path %q does not start with /", r.BatchPath)
	case strings.ContainsAny(r.BatchPath, "{}"):
		return fmt.Errorf("batch path %q holds { or }, which OpenAPI reads as a path template", r.BatchPath)
	case lookup(d.paths, r.BatchPath) != nil || d.items[r.BatchPath] != nil:
		return fmt.Errorf("batch path %s is described already", r.BatchPath)
	}
	d.items[r.BatchPath] = mapping(str("post"), batchOperation(r, d.operationIDs.take("submitBatch"+pascal(r.Name)), schema))
	d.newPaths = append(d.newPaths, r.BatchPath)
	return nil
}

// batchOperation describes the batch path of an enqueue route: its items'
// bodies are the job's schema, so a generated client gets a typed array.
func batchOperation(r JobRoute, operationID, schema string) *yaml.Node {
	desc := fmt.Sprintf("Submits up to %d `%s` jobs (route `%s`) in one request, under the batch's own "+
		"`Idempotency-Key`: a retry with it replays the whole answer. Each item is answered as a request "+
		"sent alone to `%s` with the item's key would be (its `status`, and its job document or problem), "+
		"and that key lives in the route's scope. Every accepted job is recorded in one transaction before "+
		"the answer. Two items with one key are 400 `bad-request`; with `atomic`, any failing item makes the "+
		"batch 422 `batch-refused` and nothing is recorded. Each item spends one token of the tenant's rate limit.",
		r.BatchMaxItems, r.Task, r.Name, r.Path)
	responses := mapping()
	responses.Content = append(responses.Content, str("200"), mapping(
		str("description"), str("Each item's answer."),
		str("content"), mapping(str("application/json"), mapping(str("schema"), ref("#/components/schemas/BatchResult")))))
	for _, s := range []struct{ status, response string }{
		{"400", "BadRequest"}, {"401", "Unauthorized"}, {"409", "Conflict"},
		{"413", "RequestTooLarge"}, {"422", "UnprocessableEntity"}, {"429", "RateLimited"},
		{"500", "InternalError"}, {"503", "ServiceUnavailable"},
	} {
		responses.Content = append(responses.Content, str(s.status), ref("#/components/responses/"+s.response))
	}
	intNode := func(n int) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: fmt.Sprint(n)} }
	item := mapping(
		str("type"), str("object"),
		str("required"), flowSeq(str("body")),
		str("additionalProperties"), &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: "false"},
		str("properties"), mapping(
			str("idempotency_key"), mapping(str("type"), str("string"),
				str("description"), str("The item's Idempotency-Key in the route's scope; without it, the batch's key, a colon and the item's index.")),
			str("body"), ref("#/components/schemas/"+schema),
			str("delay"), mapping(str("type"), str("integer"), str("minimum"), intNode(0),
				str("description"), str("Seconds to wait before the job runs, as Idemgate-Delay.")),
			str("not_before"), mapping(str("type"), str("string"), str("format"), str("date-time"),
				str("description"), str("When the job runs, as Idemgate-Not-Before; excludes delay.")),
		),
	)
	body := mapping(
		str("type"), str("object"),
		str("required"), flowSeq(str("items")),
		str("additionalProperties"), &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: "false"},
		str("properties"), mapping(
			str("items"), mapping(str("type"), str("array"), str("minItems"), intNode(1), str("maxItems"), intNode(r.BatchMaxItems), str("items"), item),
			str("atomic"), mapping(str("type"), str("boolean"), str("default"), &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: "false"}),
		),
	)
	return mapping(
		str("tags"), flowSeq(str("jobs")),
		str("operationId"), str(operationID),
		str("summary"), str(fmt.Sprintf("Submit a batch of %s jobs.", r.Task)),
		str("description"), block(desc),
		str("security"), seq(mapping(str("apiKey"), flowSeq())),
		str("parameters"), seq(ref("#/components/parameters/IdempotencyKey"), ref("#/components/parameters/RequestID")),
		str("requestBody"), mapping(
			str("required"), &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: "true"},
			str("content"), mapping(str("application/json"), mapping(str("schema"), body)),
		),
		str("responses"), responses,
	)
}

// describeTask adds the components of task's schema, once per task, and
// returns the name of the one that describes the payload.
func (d *document) describeTask(task string, schema json.RawMessage) (string, error) {
	if name, ok := d.taskSchema[task]; ok {
		return name, nil
	}
	if len(bytes.TrimSpace(schema)) == 0 {
		return "", errors.New("none given")
	}
	name := d.schemaNames.take(pascal(task))
	cs, err := embedSchema(schema, name, d.schemaNames)
	if err != nil {
		return "", err
	}
	d.components = append(d.components, cs...)
	d.taskSchema[task] = name
	return name, nil
}

// insert writes the new path items after GET /v1/jobs/{id}, the other
// job route (at the end when base has none), and the new schemas after
// base's.
func (d *document) insert() {
	var added []*yaml.Node
	for _, p := range d.newPaths {
		added = append(added, str(p), d.items[p])
	}
	at := len(d.paths.Content)
	for i := 0; i+1 < len(d.paths.Content); i += 2 {
		if d.paths.Content[i].Value == "/v1/jobs/{id}" {
			at = i + 2
		}
	}
	d.paths.Content = slices.Insert(d.paths.Content, at, added...)
	for _, c := range d.components {
		d.schemas.Content = append(d.schemas.Content, str(c.name), c.schema)
	}
}

// enqueueOperation describes one method of an enqueue route, the way
// openapi.yaml described the example routes before they became
// configuration.
func enqueueOperation(r JobRoute, operationID, schema string) *yaml.Node {
	desc := fmt.Sprintf("Submits a `%s` job (route `%s`). The body is the job's payload, "+
		"checked against its JSON Schema: 400 `bad-request` when it is not JSON, 422 "+
		"`invalid-payload` naming each field at fault, and nothing is queued. The answer is "+
		"202 with the job document and `Location: /v1/jobs/{id}`; a retry with the same "+
		"`Idempotency-Key` and body gets the same job.", r.Task, r.Name)
	if r.Prefix {
		desc += fmt.Sprintf("\n\nThe route also takes every path below `%s/`, with the same body; only `%s` is described here.", strings.TrimSuffix(r.Path, "/"), r.Path)
	}
	responses := mapping()
	for _, s := range []struct{ status, response string }{
		{"202", "JobAccepted"}, {"400", "BadRequest"}, {"401", "Unauthorized"}, {"409", "Conflict"},
		{"413", "RequestTooLarge"}, {"422", "UnprocessableEntity"}, {"429", "RateLimited"},
		{"500", "InternalError"}, {"503", "ServiceUnavailable"},
	} {
		responses.Content = append(responses.Content, str(s.status), ref("#/components/responses/"+s.response))
	}
	return mapping(
		str("tags"), flowSeq(str("jobs")),
		str("operationId"), str(operationID),
		str("summary"), str(fmt.Sprintf("Submit a %s job.", r.Task)),
		str("description"), block(desc),
		str("security"), seq(mapping(str("apiKey"), flowSeq())),
		str("parameters"), seq(ref("#/components/parameters/IdempotencyKey"), ref("#/components/parameters/RequestID"),
			ref("#/components/parameters/ScheduleDelay"), ref("#/components/parameters/ScheduleNotBefore")),
		str("requestBody"), mapping(
			str("required"), &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: "true"},
			str("content"), mapping(str("application/json"), mapping(str("schema"), ref("#/components/schemas/"+schema))),
		),
		str("responses"), responses,
	)
}

// namer hands out names, none twice and none already taken.
type namer struct{ taken map[string]bool }

func (n *namer) take(want string) string {
	name := want
	for i := 2; n.taken[name]; i++ {
		name = fmt.Sprintf("%s%d", want, i)
	}
	n.taken[name] = true
	return name
}

// pascal turns a task, a route or a definition name into an identifier
// that code generators keep as it is: shipment.book is ShipmentBook.
func pascal(s string) string {
	var b strings.Builder
	up := true
	for _, c := range s {
		switch {
		case c < unicode.MaxASCII && (unicode.IsLetter(c) || unicode.IsDigit(c)):
			if up {
				c = unicode.ToUpper(c)
			}
			b.WriteRune(c)
			up = false
		default:
			up = true
		}
	}
	out := b.String()
	if out == "" || unicode.IsDigit(rune(out[0])) {
		out = "Job" + out
	}
	return out
}

func str(s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s} }

// mapping builds a mapping of key, value, key, value….
func mapping(kv ...*yaml.Node) *yaml.Node {
	return &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Content: kv}
}

func seq(items ...*yaml.Node) *yaml.Node {
	return &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Content: items}
}

func flowSeq(items ...*yaml.Node) *yaml.Node {
	n := seq(items...)
	n.Style = yaml.FlowStyle
	return n
}

func ref(to string) *yaml.Node {
	n := mapping(str("$ref"), str(to))
	n.Style = yaml.FlowStyle
	return n
}

// block is text as a YAML literal block, wrapped as openapi.yaml wraps
// its descriptions.
func block(text string) *yaml.Node {
	var b strings.Builder
	for i, para := range strings.Split(text, "\n\n") {
		if i > 0 {
			b.WriteString("\n")
		}
		line := 0
		for j, w := range strings.Fields(para) {
			if j > 0 && line+1+len(w) > 72 {
				b.WriteString("\n")
				line = 0
			} else if j > 0 {
				b.WriteString(" ")
				line++
			}
			b.WriteString(w)
			line += len(w)
		}
		b.WriteString("\n")
	}
	n := str(b.String())
	n.Style = yaml.LiteralStyle
	return n
}
