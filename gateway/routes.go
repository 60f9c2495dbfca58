package gateway

import (
	"net/http"
	"sort"
	"strings"
)

// route is one entry of the table the public listener matches requests
// against.
type route struct {
	name    string
	methods map[string]bool // nil: every method
	path    string
	prefix  bool
	handler http.Handler
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
