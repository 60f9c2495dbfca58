package gateway

import (
	"net/http"
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/idemgate/idemgate/problem"
)

// overrideHeaders are the headers by which Rails, Express's
// method-override, Laravel and ASP.NET let a request name the method an
// application should run instead of the one on its request line.
var overrideHeaders = []string{"X-HTTP-Method-Override", "X-HTTP-Method", "X-Method-Override"}

// methodOverride returns the method a request names in its override
// headers, read in any spelling an upstream may fold to them (see
// sameReadAs). present is false when it carries none; method is "" when
// they name no single method (a value that is not a method token, or two
// that differ).
func methodOverride(h http.Header) (method string, present bool) {
	for name, values := range h {
		if !isOverrideHeader(name) {
			continue
		}
		for _, v := range values {
			m := strings.ToUpper(strings.TrimSpace(v))
			switch {
			case !httpguts.ValidHeaderFieldName(m), present && m != method:
				return "", true
			}
			method, present = m, true
		}
		if !present { // the header is there, with no value
			return "", true
		}
	}
	return method, present
}

func isOverrideHeader(name string) bool {
	for _, o := range overrideHeaders {
		if sameReadAs(name, o) {
			return true
		}
	}
	return false
}

// routeOverridden finds the route of a request that carries a method
// override header. A route that honours it (RouteOptions.HonourMethodOverride)
// serves the request as the method it names: claimed, limited and
// fingerprinted as that method, which is what its upstream runs. Any other
// route refuses it, so that an upstream that honours the header never runs
// a method the gateway did not protect.
func (g *Gateway) routeOverridden(w http.ResponseWriter, r *http.Request, path, method string) {
	if method != "" {
		if rt := g.table.match(method, path); rt != nil && rt.honourOverride {
			r = r.WithContext(r.Context())
			r.Method = method
			rt.handler.ServeHTTP(w, r)
			return
		}
	}
	if g.table.match(r.Method, path) == nil && (method == "" || g.table.match(method, path) == nil) {
		g.problems.Write(w, r, &problem.Error{Err: ErrNotFound, Detail: "no route matches " + r.Method + " " + r.URL.Path})
		return
	}
	detail := "this route does not honour X-HTTP-Method-Override, X-HTTP-Method or X-Method-Override; send the request with the method it means"
	if method == "" {
		detail = "the method override headers name no single HTTP method; send the request with the method it means"
	}
	g.problems.Write(w, r, &problem.Error{Err: ErrMethodOverrideRefused, Detail: detail})
}
