package gateway

import (
	"errors"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"

	"github.com/go-chi/chi/v5"
)

// route is one entry of the table the public listener matches requests
// against.
type route struct {
	name    string
	methods map[string]bool // nil: every method
	path    string
	prefix  bool
	kind    EndpointKind
	handler http.Handler
	// honourOverride: RouteOptions.HonourMethodOverride.
	honourOverride bool
}

func (rt *route) matches(method, path string) bool {
	if rt.methods != nil && !rt.methods[method] {
		return false
	}
	if !rt.prefix {
		return path == rt.path
	}
	if !strings.HasPrefix(path, rt.path) {
		return false
	}
	// /v1/payments matches /v1/payments and /v1/payments/…, not /v1/paymentsX.
	return len(path) == len(rt.path) || strings.HasSuffix(rt.path, "/") || path[len(rt.path)] == '/'
}

// table matches the longest path first; an exact path beats a prefix of
// the same length.
type table []*route

func newTable(routes []*route) table {
	t := table(append([]*route(nil), routes...))
	sort.SliceStable(t, func(i, j int) bool {
		if len(t[i].path) != len(t[j].path) {
			return len(t[i].path) > len(t[j].path)
		}
		return !t[i].prefix && t[j].prefix
	})
	return t
}

func (t table) match(method, path string) *route {
	for _, rt := range t {
		if rt.matches(method, path) {
			return rt
		}
	}
	return nil
}

// errAbnormalPath refuses a path that is not in normal form.
var errAbnormalPath = errors.New(`the path has a "." or ".." segment or an empty one ("//"), literally or percent-encoded; ` +
	"send it in normal form (RFC 3986, section 6.2.2)")

// routePath returns the path a request is routed by, or errAbnormalPath.
//
// Routes are matched, and the request forwarded, on the path as it was
// sent: nothing is resolved, so that what matched one route is what its
// upstream receives. A path an upstream could read as another one is
// refused instead: a "." or ".." segment (also "%2e", "..;x" as Tomcat
// reads it, or between encoded slashes or backslashes, which some servers
// decode into separators) and an empty segment other than a trailing
// slash ("/v1//payments", which many servers collapse).
//
// An encoded slash (%2F) stays part of its segment: "/v1/payments%2Fx"
// is one segment after /v1, so it does not match a route /v1/payments,
// and the upstream receives it as sent.
func routePath(u *url.URL) (string, error) {
	p := u.Path
	if !strings.HasPrefix(p, "/") {
		return p, nil // "*" or an authority: no route matches
	}
	// u.Path is decoded: "%2e" is ".", and an encoded slash a separator
	// here, as it is for an upstream that decodes before it resolves.
	segs := strings.Split(strings.ReplaceAll(p[1:], `\`, "/"), "/")
	for i, seg := range segs {
		name, _, _ := strings.Cut(seg, ";")
		if name == "." || name == ".." || seg == "" && i < len(segs)-1 {
			return "", errAbnormalPath
		}
	}
	raw := u.EscapedPath()
	if !strings.Contains(raw, "%2F") && !strings.Contains(raw, "%2f") {
		return p, nil
	}
	// Decode each segment on its own, keeping its slashes encoded.
	parts := strings.Split(raw, "/")
	for i, part := range parts {
		dec, err := url.PathUnescape(part)
		if err != nil {
			return "", errAbnormalPath
		}
		parts[i] = strings.ReplaceAll(dec, "/", "%2F")
	}
	return strings.Join(parts, "/"), nil
}

// Endpoint is one method and path a listener answers, as PublicRoutes and
// AdminRoutes list them.
type Endpoint struct {
	// Method is an HTTP method, or "*" for every method.
	Method string
	// Path is a chi pattern such as /v1/jobs/{id}; with Prefix, the path
	// and everything below it.
	Path   string
	Prefix bool
	Kind   EndpointKind
	// Route names the configured route that serves the endpoint; empty
	// for the gateway's own.
	Route string
}

// EndpointKind tells what serves an endpoint.
type EndpointKind string

// The kinds of endpoint.
const (
	// KindAPI is the gateway's own API, the one openapi.yaml describes.
	KindAPI EndpointKind = "api"
	// KindEnqueue is a configured route that turns requests into jobs.
	KindEnqueue EndpointKind = "enqueue"
	// KindProxy is a configured route forwarded to its upstream.
	KindProxy EndpointKind = "proxy"
	// KindHandler is a configured route served by RouteOptions.Handler.
	KindHandler EndpointKind = "handler"
	// KindTool is served beside the API on the admin listener: pprof and
	// whatever AdminMount adds (the queue UI).
	KindTool EndpointKind = "tool"
)

// PublicRoutes lists what the public listener serves: the gateway's own
// endpoints as its router registered them, then the configured routes in
// the order they are matched (longest path first). Each of the gateway's
// own GET endpoints also answers HEAD, which is not listed; a configured
// route answers HEAD only if its methods name it.
func (g *Gateway) PublicRoutes() []Endpoint {
	out := walkRoutes(g.publicMux, func(string) EndpointKind { return KindAPI })
	for _, rt := range g.table {
		ep := Endpoint{Method: "*", Path: rt.path, Prefix: rt.prefix, Kind: rt.kind, Route: rt.name}
		if rt.methods == nil {
			out = append(out, ep)
			continue
		}
		for _, m := range slices.Sorted(maps.Keys(rt.methods)) {
			ep.Method = m
			out = append(out, ep)
		}
	}
	return out
}

// AdminRoutes lists what the admin listener serves: what AdminMount added
// (matched first, the latest first), then the admin API and pprof as its
// router registered them.
func (g *Gateway) AdminRoutes() []Endpoint {
	var out []Endpoint
	for _, prefix := range slices.Backward(g.mounts) {
		out = append(out, Endpoint{Method: "*", Path: prefix, Prefix: true, Kind: KindTool})
	}
	return append(out, walkRoutes(g.adminMux, func(path string) EndpointKind {
		if strings.HasPrefix(path, pprofPrefix) {
			return KindTool
		}
		return KindAPI
	})...)
}

// walkRoutes lists what r registered, sorted by path and method. A path
// registered for every method (HandleFunc) is one "*" entry; a pattern
// ending in "/*" is a prefix.
func walkRoutes(r chi.Routes, kind func(path string) EndpointKind) []Endpoint {
	methods := map[string]map[string]bool{}
	_ = chi.Walk(r, func(method, path string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		if methods[path] == nil {
			methods[path] = map[string]bool{}
		}
		methods[path][method] = true
		return nil
	})
	var out []Endpoint
	for _, path := range slices.Sorted(maps.Keys(methods)) {
		ep := Endpoint{Path: path, Kind: kind(path)}
		if p, ok := strings.CutSuffix(path, "/*"); ok {
			ep.Path, ep.Prefix = p+"/", true
		}
		ms := methods[path]
		if everyMethod(ms) {
			ep.Method = "*"
			out = append(out, ep)
			continue
		}
		for _, m := range slices.Sorted(maps.Keys(ms)) {
			ep.Method = m
			out = append(out, ep)
		}
	}
	return out
}

// everyMethod reports whether ms holds every method chi routes.
func everyMethod(ms map[string]bool) bool {
	for _, m := range []string{
		http.MethodConnect, http.MethodDelete, http.MethodGet, http.MethodHead, http.MethodOptions,
		http.MethodPatch, http.MethodPost, http.MethodPut, http.MethodTrace,
	} {
		if !ms[m] {
			return false
		}
	}
	return true
}
