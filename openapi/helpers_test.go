package openapi_test

import (
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"

	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/openapi"
)

const problemBase = idempotency.DefaultProblemBase

// loadSpec loads and validates the embedded document, the one the
// gateway serves.
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

// described matches requests to a document's operations by path alone:
// the gateway's listeners are test servers on random ports, so the
// documented servers cannot match.
type described struct {
	doc   *openapi3.T
	paths []describedPath
}

type describedPath struct {
	template string
	re       *regexp.Regexp
	names    []string
	item     *openapi3.PathItem
}

func describe(doc *openapi3.T) *described {
	d := &described{doc: doc}
	for _, tmpl := range slices.Sorted(func(yield func(string) bool) {
		for p := range doc.Paths.Map() {
			if !yield(p) {
				return
			}
		}
	}) {
		p := describedPath{template: tmpl, item: doc.Paths.Value(tmpl)}
		segs := strings.Split(tmpl, "/")
		for i, s := range segs {
			if strings.HasPrefix(s, "{") && strings.HasSuffix(s, "}") {
				p.names = append(p.names, s[1:len(s)-1])
				segs[i] = "([^/]+)"
			} else {
				segs[i] = regexp.QuoteMeta(s)
			}
		}
		p.re = regexp.MustCompile("^" + strings.Join(segs, "/") + "$")
		d.paths = append(d.paths, p)
	}
	return d
}

// route finds the documented operation of req.
func (d *described) route(req *http.Request) (*routers.Route, map[string]string, error) {
	path := req.URL.EscapedPath()
	for _, p := range d.paths {
		m := p.re.FindStringSubmatch(path)
		if m == nil {
			continue
		}
		op := p.item.GetOperation(req.Method)
		if op == nil {
			return nil, nil, errors.New(req.Method + " " + p.template + " is not documented")
		}
		params := map[string]string{}
		for i, name := range p.names {
			v, err := url.PathUnescape(m[i+1])
			if err != nil {
				return nil, nil, err
			}
			params[name] = v
		}
		return &routers.Route{Spec: d.doc, Path: p.template, PathItem: p.item, Method: req.Method, Operation: op}, params, nil
	}
	return nil, nil, errors.New("no documented path matches " + path)
}

// standardHeaders need no description: net/http or the HTTP framing sets
// them.
var standardHeaders = map[string]bool{
	"Content-Type": true, "Content-Length": true, "Date": true, "Vary": true,
	"Transfer-Encoding": true, "Connection": true, "Content-Encoding": true,
}

// check validates the answer to ex.req against the document: a documented
// status, its headers and its body, and no header or body field that the
// document does not mention.
func (d *described) check(t *testing.T, ex exchange) {
	t.Helper()
	route, params, err := d.route(ex.req)
	if err != nil {
		t.Errorf("%s %s: %v", ex.req.Method, ex.req.URL.Path, err)
		return
	}
	opts := &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true}
	if ex.resp.Header.Get(idempotency.HeaderBodyOmitted) == "true" {
		// A replay without its body keeps the original's Content-Type.
		opts.ExcludeResponseBody = true
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: ex.req, PathParams: params, Route: route},
		Status:                 ex.resp.StatusCode,
		Header:                 ex.resp.Header,
		Options:                opts,
	}
	in.SetBodyBytes(ex.body)
	if err := openapi3filter.ValidateResponse(t.Context(), in); err != nil {
		t.Errorf("%s %s answered %d, which does not match the description: %v\nheaders: %v\nbody: %s",
			ex.req.Method, ex.req.URL.Path, ex.resp.StatusCode, err, ex.resp.Header, ex.body)
		return
	}
	ref := route.Operation.Responses.Status(ex.resp.StatusCode)
	if ref == nil || ref.Value == nil {
		return
	}
	resp := ref.Value
	for name := range ex.resp.Header {
		if standardHeaders[name] {
			continue
		}
		found := false
		for documented := range resp.Headers {
			found = found || strings.EqualFold(documented, name)
		}
		if !found {
			t.Errorf("%s %s answered %d with header %s, which is not documented", ex.req.Method, ex.req.URL.Path, ex.resp.StatusCode, name)
		}
	}
	mt, _, _ := mime.ParseMediaType(ex.resp.Header.Get("Content-Type"))
	content := resp.Content.Get(mt)
	if opts.ExcludeResponseBody || content == nil || content.Schema == nil || !strings.HasSuffix(mt, "json") {
		return
	}
	var v any
	if err := json.Unmarshal(ex.body, &v); err != nil {
		t.Errorf("%s %s: body is not JSON: %v", ex.req.Method, ex.req.URL.Path, err)
		return
	}
	for _, f := range undocumentedFields(content.Schema.Value, v, "") {
		t.Errorf("%s %s answered %d with field %s, which is not documented", ex.req.Method, ex.req.URL.Path, ex.resp.StatusCode, f)
	}
}

// undocumentedFields lists the object members of v that schema s does not
// describe, where s lists its properties and allows no others by schema.
func undocumentedFields(s *openapi3.Schema, v any, at string) []string {
	if s == nil {
		return nil
	}
	props := map[string]*openapi3.SchemaRef{}
	for k, p := range s.Properties {
		props[k] = p
	}
	for _, sub := range s.AllOf {
		if sub.Value != nil {
			for k, p := range sub.Value.Properties {
				props[k] = p
			}
		}
	}
	var out []string
	switch v := v.(type) {
	case map[string]any:
		if len(props) == 0 || s.AdditionalProperties.Schema != nil {
			return nil
		}
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			p, ok := props[k]
			if !ok {
				out = append(out, at+"/"+k)
				continue
			}
			out = append(out, undocumentedFields(p.Value, v[k], at+"/"+k)...)
		}
	case []any:
		if s.Items != nil {
			for _, e := range v {
				out = append(out, undocumentedFields(s.Items.Value, e, at+"/*")...)
			}
		}
	}
	return out
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
	var p openapi.Problem
	if err := json.Unmarshal(ex.body, &p); err != nil {
		t.Fatalf("problem body: %v: %s", err, ex.body)
	}
	if p.Type != problemBase+slug {
		t.Errorf("type %q, want %q (detail %q)", p.Type, problemBase+slug, p.Detail)
	}
	if p.Status != status {
		t.Errorf("status member %d, want %d", p.Status, status)
	}
	if p.Instance != ex.req.URL.Path {
		t.Errorf("instance %q, want the request path %q", p.Instance, ex.req.URL.Path)
	}
	// A replayed problem is the stored body: its request_id is the
	// original request's, the header this response's.
	replayed := ex.resp.Header.Get(idempotency.HeaderReplayed) == "true"
	if id := ex.resp.Header.Get("X-Request-Id"); p.RequestId == "" || p.RequestId != id && !replayed {
		t.Errorf("request_id %q, want the X-Request-Id header %q", p.RequestId, id)
	}
	if p.Title == "" || p.Detail == "" {
		t.Errorf("title %q and detail %q must not be empty", p.Title, p.Detail)
	}
	return p
}

// slugOf returns the slug of a problem type under the default base.
func slugOf(typ string) string { return strings.TrimPrefix(typ, problemBase) }
