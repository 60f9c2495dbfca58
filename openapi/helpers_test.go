package openapi_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/routers"

	"github.com/idemgate/idemgate/gateway/gatewaytest"
	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/middleware/requestid"
	"github.com/idemgate/idemgate/openapi"
	"github.com/idemgate/idemgate/problem"
)

const problemBase = problem.DefaultBase

// loadSpec loads and validates the embedded document: the gateway's own
// endpoints, without any enqueue route.
func loadSpec(t testing.TB) *openapi3.T {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromData(openapi.Spec)
	if err != nil {
		t.Fatalf("load openapi.yaml: %v", err)
	}
	if err := doc.Validate(t.Context()); err != nil {
		t.Fatalf("openapi.yaml is not a valid OpenAPI document: %v", err)
	}
	return doc
}

// loadServed loads and validates the document gatewaytest's gateway
// serves: the embedded one with the example enqueue routes.
func loadServed(t testing.TB) *openapi3.T {
	t.Helper()
	_, jsonDoc := gatewaytest.Documents()
	return loadDoc(t, jsonDoc)
}

// loadDoc loads and validates a served document.
func loadDoc(t testing.TB, data []byte) *openapi3.T {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromData(data)
	if err != nil {
		t.Fatalf("load the served document: %v", err)
	}
	if err := doc.Validate(t.Context()); err != nil {
		t.Fatalf("the served document is not a valid OpenAPI document: %v", err)
	}
	return doc
}

// loadFile loads and validates a document that may $ref openapi.yaml.
func loadFile(t testing.TB, path string) *openapi3.T {
	t.Helper()
	loader := openapi3.NewLoader()
	loader.IsExternalRefsAllowed = true
	doc, err := loader.LoadFromFile(path)
	if err != nil {
		t.Fatalf("load %s: %v", path, err)
	}
	if err := doc.Validate(t.Context()); err != nil {
		t.Fatalf("%s is not a valid OpenAPI document: %v", path, err)
	}
	return doc
}

// described checks the gateway's answers against a document.
type described struct {
	doc *openapi3.T
	v   *gatewaytest.Validator
}

func describe(t testing.TB, doc *openapi3.T) *described {
	t.Helper()
	v, err := gatewaytest.NewValidator(t.Context(), doc)
	if err != nil {
		t.Fatal(err)
	}
	return &described{doc: doc, v: v}
}

// route finds the documented operation of req.
func (d *described) route(req *http.Request) (*routers.Route, map[string]string, error) {
	return d.v.Route(req)
}

// check validates the answer to ex.req against the document: a documented
// status, its headers and its body, and no header or body field that the
// document does not mention.
func (d *described) check(t *testing.T, ex exchange) {
	t.Helper()
	resp := *ex.resp
	resp.Request = ex.req
	if err := d.v.Validate(t.Context(), &resp, ex.body); err != nil {
		t.Error(err)
	}
}

// checkSchema validates a JSON body against one of the document's schemas.
func (d *described) checkSchema(t *testing.T, name string, body []byte) {
	t.Helper()
	ref := d.doc.Components.Schemas[name]
	if ref == nil {
		t.Fatalf("no schema %s", name)
	}
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("body is not JSON: %v: %s", err, body)
	}
	if err := ref.Value.VisitJSON(v, openapi3.VisitAsResponse()); err != nil {
		t.Errorf("body does not match schema %s: %v\n%s", name, err, body)
	}
}

// exchange is one request and its answer, body read.
type exchange struct {
	req  *http.Request
	resp *http.Response
	body []byte
}

func roundTrip(c *http.Client, req *http.Request) (exchange, error) {
	resp, err := c.Do(req)
	if err != nil {
		return exchange{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return exchange{req: req, resp: resp, body: body}, err
}

// sendAsync sends req in the background, for a test that holds it in
// flight meanwhile; the channel yields its exchange, without a response
// when it failed (which fails the test).
func sendAsync(t *testing.T, c *http.Client, req *http.Request) <-chan exchange {
	t.Helper()
	done := make(chan exchange, 1)
	go func() {
		ex, err := roundTrip(c, req)
		if err != nil {
			t.Error(err)
		}
		done <- ex
	}()
	return done
}

// decodeBody decodes ex's body, the document what names, as a T.
func decodeBody[T any](t *testing.T, ex exchange, what string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(ex.body, &v); err != nil {
		t.Fatalf("%s: %v: %s", what, err, ex.body)
	}
	return v
}

func send(t *testing.T, c *http.Client, req *http.Request) exchange {
	t.Helper()
	ex, err := roundTrip(c, req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	return ex
}

// newRequest builds a request; header holds name, value pairs, added in
// order (a name given twice is sent on two lines).
func newRequest(t testing.TB, method, target, body string, header ...string) *http.Request {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, target, r)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	return req
}

func bearer(token string) string { return "Bearer " + token }

// wantStatus fails the test unless ex answered status.
func wantStatus(t *testing.T, ex exchange, status int) {
	t.Helper()
	if ex.resp.StatusCode != status {
		t.Fatalf("%s %s: status %d, want %d\nheaders: %v\nbody: %s", ex.req.Method, ex.req.URL.Path, ex.resp.StatusCode, status, ex.resp.Header, ex.body)
	}
}

// wantProblem checks that ex is the problem document of slug with status,
// consistent with its request, and returns it.
func wantProblem(t *testing.T, ex exchange, status int, slug string) openapi.Problem {
	t.Helper()
	wantStatus(t, ex, status)
	if ct := ex.resp.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type %q, want application/problem+json", ct)
	}
	p := decodeBody[openapi.Problem](t, ex, "problem body")
	if p.Type != problemBase+slug {
		t.Errorf("type %q, want %q (detail %q)", p.Type, problemBase+slug, p.Detail)
	}
	if p.Status != status {
		t.Errorf("status member %d, want %d", p.Status, status)
	}
	// A replayed problem is the stored body: its request_id and instance
	// are the original request's, the header this response's.
	replayed := ex.resp.Header.Get(idempotency.HeaderReplayed) == "true"
	if id := ex.resp.Header.Get("X-Request-Id"); p.RequestId == "" || p.RequestId != id && !replayed {
		t.Errorf("request_id %q, want the X-Request-Id header %q", p.RequestId, id)
	}
	if p.Instance != requestid.URN(p.RequestId) {
		t.Errorf("instance %q, want %q, the urn:uuid: of request_id %q", p.Instance, requestid.URN(p.RequestId), p.RequestId)
	}
	if p.Retryable != problemRetryable[slug] {
		t.Errorf("retryable %v, want %v", p.Retryable, problemRetryable[slug])
	}
	doc, link := problemDocumentation[slug], ""
	if doc != "" {
		link = "<" + doc + `>; rel="describedby"; type="text/html"`
	}
	if got := deref(p.Documentation); got != doc || ex.resp.Header.Get("Link") != link {
		t.Errorf("documentation %q and Link %q, want %q and %q", got, ex.resp.Header.Get("Link"), doc, link)
	}
	// The key is the one the request sent, parsed; the refusals of a
	// request whose key was read always name it.
	sent := ex.req.Header.Get(idempotency.HeaderKey)
	if p.IdempotencyKey != nil && *p.IdempotencyKey != strings.Trim(sent, `"`) {
		t.Errorf("idempotency_key %q, want the key sent, %q", *p.IdempotencyKey, sent)
	}
	switch slug {
	case "idempotency-key-reused", "idempotency-key-in-use", "idempotency-outcome-unknown", "request-too-large":
		if p.IdempotencyKey == nil {
			t.Errorf("%s names no idempotency_key (sent %q)", slug, sent)
		}
	}
	if p.Title == "" || p.Detail == "" {
		t.Errorf("title %q and detail %q must not be empty", p.Title, p.Detail)
	}
	return p
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// slugOf returns the slug of a problem type under the default base.
func slugOf(typ string) string { return strings.TrimPrefix(typ, problemBase) }
