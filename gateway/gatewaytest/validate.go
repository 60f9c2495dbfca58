package gatewaytest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"

	"github.com/idemgate/idemgate/middleware/idempotency"
)

// Validator checks answers against an OpenAPI document. It finds a
// request's operation by method and path alone: a gateway under test
// listens on a random port, which the documented servers cannot match.
//
//	v, err := gatewaytest.NewValidator(ctx, nil) // the example routes' document
//	err = v.Validate(ctx, resp, body)
type Validator struct {
	doc   *openapi3.T
	paths []docPath
}

type docPath struct {
	template string
	re       *regexp.Regexp
	names    []string
	item     *openapi3.PathItem
}

// NewValidator validates doc and returns its validator; a nil doc is
// the document the gateway of Options serves (Documents): openapi.yaml
// with the example enqueue routes.
func NewValidator(ctx context.Context, doc *openapi3.T) (*Validator, error) {
	if doc == nil {
		_, jsonDoc := Documents()
		var err error
		if doc, err = openapi3.NewLoader().LoadFromData(jsonDoc); err != nil {
			return nil, fmt.Errorf("the served document: %w", err)
		}
	}
	if err := doc.Validate(ctx); err != nil {
		return nil, fmt.Errorf("not a valid OpenAPI document: %w", err)
	}
	v := &Validator{doc: doc}
	for _, tmpl := range slices.Sorted(func(yield func(string) bool) {
		for p := range doc.Paths.Map() {
			if !yield(p) {
				return
			}
		}
	}) {
		p := docPath{template: tmpl, item: doc.Paths.Value(tmpl)}
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
		v.paths = append(v.paths, p)
	}
	return v, nil
}

// Doc is the document v checks against.
func (v *Validator) Doc() *openapi3.T { return v.doc }

// Route finds the documented operation of req and its path parameters.
func (v *Validator) Route(req *http.Request) (*routers.Route, map[string]string, error) {
	path := req.URL.EscapedPath()
	for _, p := range v.paths {
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
			s, err := url.PathUnescape(m[i+1])
			if err != nil {
				return nil, nil, err
			}
			params[name] = s
		}
		return &routers.Route{Spec: v.doc, Path: p.template, PathItem: p.item, Method: req.Method, Operation: op}, params, nil
	}
	return nil, nil, errors.New("no documented path matches " + path)
}

// standardHeaders need no description: net/http or the HTTP framing sets
// them.
var standardHeaders = map[string]bool{
	"Content-Type": true, "Content-Length": true, "Date": true, "Vary": true,
	"Transfer-Encoding": true, "Connection": true, "Content-Encoding": true,
}

// Validate checks resp, the answer to resp.Request whose body was read
// into body, against the document: a documented status, its headers and
// its body (openapi3filter), and no header or body field that the
// document does not mention. It reports every problem it finds.
func (v *Validator) Validate(ctx context.Context, resp *http.Response, body []byte) error {
	req := resp.Request
	if req == nil {
		return errors.New("the response has no request")
	}
	route, params, err := v.Route(req)
	if err != nil {
		return err
	}
	opts := &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true}
	if resp.Header.Get(idempotency.HeaderBodyOmitted) == "true" {
		// A replay without its body keeps the original's Content-Type.
		opts.ExcludeResponseBody = true
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route},
		Status:                 resp.StatusCode,
		Header:                 resp.Header,
		Options:                opts,
	}
	in.SetBodyBytes(body)
	if err := openapi3filter.ValidateResponse(ctx, in); err != nil {
		return fmt.Errorf("%s %s answered %d, which does not match the description: %w\nheaders: %v\nbody: %s",
			req.Method, req.URL.Path, resp.StatusCode, err, resp.Header, body)
	}
	ref := route.Operation.Responses.Status(resp.StatusCode)
	if ref == nil || ref.Value == nil {
		return nil
	}
	documented := ref.Value
	var errs []error
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for name := range resp.Header {
			if !yield(name) {
				return
			}
		}
	}) {
		if standardHeaders[name] {
			continue
		}
		found := false
		for d := range documented.Headers {
			found = found || strings.EqualFold(d, name)
		}
		if !found {
			errs = append(errs, fmt.Errorf("%s %s answered %d with header %s, which is not documented", req.Method, req.URL.Path, resp.StatusCode, name))
		}
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	content := documented.Content.Get(mt)
	if opts.ExcludeResponseBody || content == nil || content.Schema == nil || !strings.HasSuffix(mt, "json") {
		return errors.Join(errs...)
	}
	var doc any
	if err := json.Unmarshal(body, &doc); err != nil {
		return errors.Join(append(errs, fmt.Errorf("%s %s: body is not JSON: %w", req.Method, req.URL.Path, err))...)
	}
	for _, f := range undocumentedFields(content.Schema.Value, doc, "") {
		errs = append(errs, fmt.Errorf("%s %s answered %d with field %s, which is not documented", req.Method, req.URL.Path, resp.StatusCode, f))
	}
	return errors.Join(errs...)
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
