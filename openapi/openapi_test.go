package openapi_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"go.uber.org/goleak"
	"go.yaml.in/yaml/v3"

	"github.com/idemgate/idemgate/gateway"
	"github.com/idemgate/idemgate/gateway/gatewaytest"
	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/middleware/requestid"
	"github.com/idemgate/idemgate/openapi"
	"github.com/idemgate/idemgate/problem"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// problemStatus is every problem type the gateway answers with and its
// status: the contract of docs/reference/problems.md.
var problemStatus = map[string]int{
	"idempotency-key-missing":       400,
	"idempotency-key-invalid":       400,
	"bad-request":                   400,
	"method-override-refused":       400,
	"invalid-schedule":              400,
	"unauthorized":                  401,
	"forbidden":                     403,
	"not-found":                     404,
	"idempotency-key-in-use":        409,
	"idempotency-outcome-unknown":   409,
	"request-too-large":             413,
	"unsupported-content-encoding":  415,
	"idempotency-key-reused":        422,
	"invalid-payload":               422,
	"schedule-out-of-range":         422,
	"rate-limited":                  429,
	"internal":                      500,
	"upstream-unavailable":          502,
	"idempotency-store-unavailable": 503,
	"idempotency-store-full":        503,
	"queue-unavailable":             503,
	"job-not-cancellable":           409,
	"batch-refused":                 422,
	"schedule-quota-exceeded":       422,
	"not-ready":                     503,
	"upstream-timeout":              504,
}

// problemRetryable lists the problem types a client may simply send again
// (the same request, the same key); every other type is not retryable.
var problemRetryable = map[string]bool{
	"idempotency-key-in-use":        true,
	"rate-limited":                  true,
	"upstream-unavailable":          true,
	"idempotency-store-unavailable": true,
	"idempotency-store-full":        true,
	"queue-unavailable":             true,
	"not-ready":                     true,
	"upstream-timeout":              true,
}

const draft = "https://datatracker.ietf.org/doc/html/draft-ietf-httpapi-idempotency-key-header"

// problemDocumentation is the draft section of each problem type the
// draft covers: its documentation member and Link rel="describedby".
var problemDocumentation = map[string]string{
	"idempotency-key-missing":     draft + "#section-2.1",
	"idempotency-key-invalid":     draft + "#section-2.1",
	"idempotency-key-reused":      draft + "#section-2.2",
	"idempotency-key-in-use":      draft + "#section-2.6",
	"idempotency-outcome-unknown": draft + "#section-2.6",
}

func TestProblemTableMatchesMiddleware(t *testing.T) {
	t.Parallel()
	for _, p := range idempotency.Refusals() {
		if got, ok := problemStatus[p.Slug]; !ok || got != p.Status {
			t.Errorf("the middleware answers %v with %d %s; the description says %d", p.Err, p.Status, p.Slug, got)
		}
		if p.Retryable() != problemRetryable[p.Slug] || p.Documentation() != problemDocumentation[p.Slug] {
			t.Errorf("the middleware says %s is retryable=%v, documented at %q; the description says %v, %q",
				p.Slug, p.Retryable(), p.Documentation(), problemRetryable[p.Slug], problemDocumentation[p.Slug])
		}
	}
}

// TestProblemWriterWritesTheProblemSchema: the one renderer of problem
// documents, as the library's DefaultErrorHandler and as the gateway's
// writer, writes documents that decode strictly into Problem, and the
// gateway's are byte for byte what Problem encodes to: its members, in its
// order.
func TestProblemWriterWritesTheProblemSchema(t *testing.T) {
	t.Parallel()
	gw := gateway.NewProblemWriter(problem.DefaultBase, slog.New(slog.DiscardHandler))
	errs := []error{
		&problem.Error{Err: gateway.ErrInvalidPayload, Detail: "invalid payload: amount_cents: must be at least 1",
			Fields: []problem.FieldFault{{Field: "amount_cents", Message: "must be at least 1"}}},
		&problem.Error{Err: gateway.ErrUpstreamUnavailable, Detail: "refused", Cause: errors.New("dial tcp: refused")},
		errors.New("not one of ours"),
	}
	for _, p := range idempotency.Refusals() {
		errs = append(errs, &problem.Error{Err: p.Err, Detail: "refused", Key: "order-42", RetryAfter: time.Second})
	}
	for _, err := range errs {
		for _, w := range []struct {
			name  string
			write func(http.ResponseWriter, *http.Request, error)
		}{{"DefaultErrorHandler", idempotency.DefaultErrorHandler}, {"gateway", gw.Write}} {
			rec := httptest.NewRecorder()
			requestid.Middleware(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
				w.write(rw, r, err)
			})).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/payments", nil))
			var p openapi.Problem
			dec := json.NewDecoder(bytes.NewReader(rec.Body.Bytes()))
			dec.DisallowUnknownFields()
			if derr := dec.Decode(&p); derr != nil {
				t.Errorf("%s, %v: %s does not decode into Problem: %v", w.name, err, rec.Body, derr)
				continue
			}
			if p.Status != rec.Code || p.Type == "" || p.Title == "" || p.Detail == "" || p.Instance == "" {
				t.Errorf("%s, %v: %s lacks a member Problem requires", w.name, err, rec.Body)
			}
			if w.name != "gateway" {
				continue // no request_id: it has no request id to name
			}
			again, _ := json.Marshal(p)
			if !bytes.Equal(append(again, '\n'), rec.Body.Bytes()) {
				t.Errorf("%v: the gateway wrote\n%s\nProblem encodes it as\n%s", err, rec.Body, again)
			}
		}
	}
}

func TestSpecIsValid(t *testing.T) {
	t.Parallel()
	doc := loadSpec(t) // validates, examples included
	if doc.OpenAPI != "3.1.0" {
		t.Errorf("openapi %q, want 3.1.0: its schemas are JSON Schema 2020-12, the dialect of the jobs' schemas it embeds", doc.OpenAPI)
	}
	if len(doc.Servers) != 1 {
		t.Errorf("want one server, the public listener; got %d", len(doc.Servers))
	}
	checkOperations(t, doc)
}

// checkOperations checks every operation of doc: an id, a summary, a tag,
// credentials, documented statuses and, for an enqueue route, what every
// enqueue route takes and answers.
func checkOperations(t *testing.T, doc *openapi3.T) {
	t.Helper()
	operationIDs := map[string]bool{}
	for path, item := range doc.Paths.Map() {
		admin := len(item.Servers) > 0
		for method, op := range item.Operations() {
			name := method + " " + path
			if op.OperationID == "" || op.Summary == "" || len(op.Tags) == 0 {
				t.Errorf("%s: needs an operationId, a summary and a tag", name)
			}
			if operationIDs[op.OperationID] {
				t.Errorf("%s: operationId %s is used twice", name, op.OperationID)
			}
			operationIDs[op.OperationID] = true
			checkSecurity(t, name, op, admin)
			ok2xx := false
			for code, ref := range op.Responses.Map() {
				status, err := strconv.Atoi(code)
				if err != nil {
					t.Errorf("%s: response %q: give every status, not a range or default", name, code)
					continue
				}
				ok2xx = ok2xx || status < 300
				checkResponse(t, name+" "+code, status, ref.Value)
			}
			if !ok2xx {
				t.Errorf("%s: no success response", name)
			}
			// The gateway's own job endpoints are not enqueue routes: the
			// cancel converges and needs no key, the others only read. The
			// schedules' endpoints converge (PUT, pause) or key their job
			// by the Idempotency-Key themselves (trigger).
			if !admin && path != "/v1/jobs" && path != "/v1/jobs/{id}" && path != "/v1/jobs/{id}/cancel" && path != "/v1/batches/{id}" &&
				!slices.Contains(op.Tags, "health") && !slices.Contains(op.Tags, "schedules") {
				checkEnqueue(t, name, op)
			}
		}
	}
}

func checkSecurity(t *testing.T, name string, op *openapi3.Operation, admin bool) {
	t.Helper()
	if op.Security == nil {
		t.Errorf("%s: say which credentials it needs (security: [] for none)", name)
		return
	}
	var schemes []string
	for _, req := range *op.Security {
		for s := range req {
			schemes = append(schemes, s)
		}
	}
	switch {
	case slices.Contains(op.Tags, "health"):
		if len(schemes) != 0 {
			t.Errorf("%s: health endpoints need no credentials, got %v", name, schemes)
		}
	case admin:
		if !slices.Equal(schemes, []string{"adminToken"}) {
			t.Errorf("%s: admin endpoints need the admin token, got %v", name, schemes)
		}
		if _, ok := op.Responses.Map()["401"]; !ok {
			t.Errorf("%s: no 401", name)
		}
	default:
		if !slices.Equal(schemes, []string{"apiKey"}) {
			t.Errorf("%s: tenant endpoints need an API key, got %v", name, schemes)
		}
		if _, ok := op.Responses.Map()["401"]; !ok {
			t.Errorf("%s: no 401", name)
		}
	}
}

// checkResponse: every answer names its request id; every error is a
// problem document whose examples are problems of this status.
func checkResponse(t *testing.T, name string, status int, resp *openapi3.Response) {
	t.Helper()
	if resp.Headers["X-Request-Id"] == nil {
		t.Errorf("%s: does not document X-Request-Id", name)
	}
	if status < 400 {
		return
	}
	if len(resp.Content) != 1 || resp.Content["application/problem+json"] == nil {
		t.Errorf("%s: an error must be application/problem+json only", name)
		return
	}
	mt := resp.Content["application/problem+json"]
	if mt.Schema == nil || mt.Schema.Ref != "#/components/schemas/Problem" {
		t.Errorf("%s: an error's schema must be Problem", name)
	}
	if len(mt.Examples) == 0 {
		t.Errorf("%s: no example", name)
	}
	for ex, ref := range mt.Examples {
		v, _ := ref.Value.Value.(map[string]any)
		typ, _ := v["type"].(string)
		got, ok := problemStatus[slugOf(typ)]
		if !strings.HasPrefix(typ, problemBase) || !ok {
			t.Errorf("%s: example %s has unknown type %q", name, ex, typ)
			continue
		}
		if got != status || v["status"] != float64(status) {
			t.Errorf("%s: example %s is a %d %s", name, ex, got, typ)
		}
		for _, member := range []string{"type", "title", "status", "detail", "instance", "request_id", "retryable"} {
			if _, ok := v[member]; !ok {
				t.Errorf("%s: example %s lacks %s: %v", name, ex, member, v)
			}
		}
		slug := slugOf(typ)
		if v["retryable"] != problemRetryable[slug] {
			t.Errorf("%s: example %s has retryable %v, want %v", name, ex, v["retryable"], problemRetryable[slug])
		}
		if doc, _ := v["documentation"].(string); doc != problemDocumentation[slug] {
			t.Errorf("%s: example %s has documentation %q, want %q", name, ex, doc, problemDocumentation[slug])
		}
		if id, _ := v["request_id"].(string); v["instance"] != "urn:uuid:"+id {
			t.Errorf("%s: example %s has instance %v for request_id %q", name, ex, v["instance"], id)
		}
		if _, ok := problemDocumentation[slug]; ok && resp.Headers["Link"] == nil {
			t.Errorf("%s: example %s links the draft, but the response does not document Link", name, ex)
		}
	}
	if status == 429 || status == 503 {
		if h := resp.Headers["Retry-After"]; h == nil || !h.Value.Required {
			t.Errorf("%s: must always send Retry-After", name)
		}
	}
}

// checkEnqueue: a job route takes a key and a payload, answers 202, and
// documents every refusal of the idempotency layer.
func checkEnqueue(t *testing.T, name string, op *openapi3.Operation) {
	t.Helper()
	var key bool
	for _, p := range op.Parameters {
		key = key || p.Ref == "#/components/parameters/IdempotencyKey"
	}
	if !key {
		t.Errorf("%s: does not take the Idempotency-Key parameter", name)
	}
	if op.RequestBody == nil || !op.RequestBody.Value.Required || op.RequestBody.Value.Content.Get("application/json") == nil {
		t.Errorf("%s: needs a required application/json body", name)
	}
	accepted := "202"
	if strings.HasPrefix(op.OperationID, "submitBatch") {
		accepted = "200" // a batch path answers each item in its document
	}
	for _, code := range []string{accepted, "400", "401", "409", "413", "422", "429", "503"} {
		if op.Responses.Map()[code] == nil {
			t.Errorf("%s: does not document %s", name, code)
		}
	}
	if r := op.Responses.Map()["202"]; r != nil && r.Ref != "#/components/responses/JobAccepted" {
		t.Errorf("%s: 202 must be the JobAccepted response", name)
	}
}

// TestEveryProblemTypeIsDocumented: the description tells clients every
// slug, with an example, and its status.
func TestEveryProblemTypeIsDocumented(t *testing.T) {
	t.Parallel()
	doc := loadSpec(t)
	examples := map[string]bool{}
	for _, ex := range doc.Components.Examples {
		if v, ok := ex.Value.Value.(map[string]any); ok {
			if typ, ok := v["type"].(string); ok {
				examples[slugOf(typ)] = true
			}
		}
	}
	for slug, status := range problemStatus {
		if !examples[slug] {
			t.Errorf("%s: no example in components.examples", slug)
		}
		row := "| " + strconv.Itoa(status)
		found := false
		for line := range strings.SplitSeq(doc.Info.Description, "\n") {
			found = found || strings.Contains(line, "`"+slug+"`") && strings.Contains(line, row)
		}
		if !found {
			t.Errorf("%s: not in the table of info.description with status %d", slug, status)
		}
	}
}

// TestPolicyIsPublished: the description carries the published
// idempotency policy, with the defaults the middleware applies.
func TestPolicyIsPublished(t *testing.T) {
	t.Parallel()
	doc := loadSpec(t)
	desc := doc.Info.Description
	for _, want := range []string{
		"retention", "(24h)", "expires", "janitor", "What is stored", "What releases a key",
		"408, 425, 429, 502, 503 or 504", "max_stored_response_bytes", "Idempotent-Body-Omitted",
		"Idempotency-Fencing-Token", "on_ambiguous: hold", "(tenant, route, key)", "fingerprint",
		"strict", "compat", "(255)", "lease",
	} {
		if !strings.Contains(desc, want) {
			t.Errorf("info.description does not mention %q", want)
		}
	}
	for _, status := range []int{408, 425, 429, 502, 503, 504} {
		if !idempotency.ReleasesKey(status) {
			t.Errorf("the description says %d releases the key; the middleware does not", status)
		}
	}
	for _, status := range []int{200, 201, 202, 400, 404, 409, 422, 500} {
		if idempotency.ReleasesKey(status) {
			t.Errorf("the middleware releases the key on %d; the description says it is stored", status)
		}
	}
	key := doc.Components.Parameters["IdempotencyKey"].Value
	for _, want := range []string{"strict", "compat", "255", "sf-string"} {
		if !strings.Contains(key.Description, want) {
			t.Errorf("the Idempotency-Key parameter does not mention %q", want)
		}
	}
	if !key.Required || key.In != "header" || key.Name != idempotency.HeaderKey {
		t.Errorf("the Idempotency-Key parameter must be a required header named %s", idempotency.HeaderKey)
	}
}

func TestSpecJSONIsSpec(t *testing.T) {
	t.Parallel()
	var fromYAML, fromJSON any
	if err := yaml.Unmarshal(openapi.Spec, &fromYAML); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(fromYAML)
	if err != nil {
		t.Fatalf("openapi.yaml has a value JSON cannot hold: %v", err)
	}
	if err := json.Unmarshal(b, &fromYAML); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(openapi.SpecJSON, &fromJSON); err != nil {
		t.Fatalf("SpecJSON is not JSON: %v", err)
	}
	if !reflect.DeepEqual(fromYAML, fromJSON) {
		t.Error("SpecJSON does not hold the same document as Spec")
	}

	// The keys keep the YAML's order, so the JSON reads like the YAML.
	var root yaml.Node
	if err := yaml.Unmarshal(openapi.Spec, &root); err != nil {
		t.Fatal(err)
	}
	var yamlKeys []string
	for i, n := range root.Content[0].Content {
		if i%2 == 0 {
			yamlKeys = append(yamlKeys, n.Value)
		}
	}
	if got := topLevelKeys(t, openapi.SpecJSON); !slices.Equal(got, yamlKeys) {
		t.Errorf("SpecJSON's keys are %v, want the YAML's order %v", got, yamlKeys)
	}

	doc, err := openapi3.NewLoader().LoadFromData(openapi.SpecJSON)
	if err != nil {
		t.Fatalf("load SpecJSON: %v", err)
	}
	if err := doc.Validate(t.Context()); err != nil {
		t.Fatalf("SpecJSON is not a valid OpenAPI document: %v", err)
	}
}

func topLevelKeys(t *testing.T, b []byte) []string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	if _, err := dec.Token(); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, tok.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			t.Fatal(err)
		}
	}
	return keys
}

func TestYAMLToJSON(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, yaml, want string
	}{
		{"key order kept", "b: 1\na: 2\n", `{"b":1,"a":2}`},
		{"scalars typed", "s: text\ni: 42\nf: 1.5\nt: true\nn: null\nq: \"42\"\n", `{"s":"text","i":42,"f":1.5,"t":true,"n":null,"q":"42"}`},
		{"status codes as keys", "\"200\": ok\n404: missing\n", `{"200":"ok","404":"missing"}`},
		{"dates stay strings", "d: 2026-12-02T19:43:56Z\n", `{"d":"2026-12-02T19:43:56Z"}`},
		{"flow style", "a: {b: [1, two, {c: d}]}\n", `{"a":{"b":[1,"two",{"c":"d"}]}}`},
		{"aliases expanded", "a: &x {k: v}\nb: *x\n", `{"a":{"k":"v"},"b":{"k":"v"}}`},
		{"block text", "d: |\n  one\n  two\n", `{"d":"one\ntwo\n"}`},
		{"empty document", "", `null`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := openapi.YAMLToJSON([]byte(tc.yaml))
			if err != nil {
				t.Fatal(err)
			}
			var want bytes.Buffer
			if err := json.Indent(&want, []byte(tc.want), "", "  "); err != nil {
				t.Fatal(err)
			}
			want.WriteByte('\n')
			if string(got) != want.String() {
				t.Errorf("got\n%s\nwant\n%s", got, want.String())
			}
		})
	}
	for _, bad := range []string{"a: [\n", "<<: {a: 1}\n", "? [a, b]\n: c\n", "a: .inf\n"} {
		if got, err := openapi.YAMLToJSON([]byte(bad)); err == nil {
			t.Errorf("YAMLToJSON(%q) = %s, want an error", bad, got)
		}
	}
}

// TestSpecIsServed: /openapi.yaml and /openapi.json are the documents
// WithJobRoutes makes of the embedded one and the gateway's enqueue
// routes, and describe those routes.
func TestSpecIsServed(t *testing.T) {
	t.Parallel()
	wantYAML, wantJSON := gatewaytest.Documents()
	srv := startDefault(t)
	for _, tc := range []struct {
		path, contentType string
		want              []byte
	}{
		{"/openapi.yaml", "application/yaml", wantYAML},
		{"/openapi.json", "application/json", wantJSON},
	} {
		t.Run(tc.path, func(t *testing.T) {
			t.Parallel()
			ex := send(t, srv.Public.Client(), newRequest(t, http.MethodGet, srv.Public.URL+tc.path, ""))
			wantStatus(t, ex, http.StatusOK)
			if ct := ex.resp.Header.Get("Content-Type"); ct != tc.contentType {
				t.Errorf("Content-Type %q, want %s", ct, tc.contentType)
			}
			// The body is the document itself: compare it whole rather
			// than against its own (open-ended) schema.
			if !bytes.Equal(ex.body, tc.want) {
				t.Errorf("GET %s is not the document of the gateway's routes", tc.path)
			}
			doc := loadDoc(t, ex.body)
			for _, r := range gatewaytest.EnqueueRoutes() {
				if item := doc.Paths.Value(r.Path); item == nil || item.Post == nil {
					t.Errorf("GET %s does not describe the enqueue route POST %s", tc.path, r.Path)
				}
			}
		})
	}
}

var errDown = errors.New("dial tcp 10.0.0.7:5432: connect: connection refused")
