package config

import (
	"strings"
	"testing"
)

func TestUnknownKeys(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{
			name: "top level, with a suggestion",
			yaml: minimal + "idempotancy:\n  lease: 10s\n",
			want: `k.yaml:4: idempotancy: unknown key; did you mean "idempotency"?`,
		},
		{
			name: "inside a route's idempotency block",
			yaml: minimal + "routes:\n  - name: a\n    path: /a\n    upstream: http://u\n    idempotency:\n      leese: 1m\n",
			want: `k.yaml:9: routes[0].idempotency.leese: unknown key; did you mean "lease"?`,
		},
		{
			name: "in a flow mapping, nothing close",
			yaml: minimal + "tenants: [{name: a, burst: 3}]\n",
			want: `k.yaml:4: tenants[0].burst: unknown key`,
		},
		{
			name: "a key written twice",
			yaml: minimal + "listen: :1\nlisten: :2\n",
			want: `k.yaml:5: listen: set twice (first on line 4)`,
		},
		{
			name: "a key written twice in a route",
			yaml: minimal + "routes:\n  - name: a\n    path: /a\n    path: /b\n    upstream: http://u\n  - {name: b, path: /b}\n",
			// The decoder skips the route, so the routes are not validated.
			want: "k.yaml:7: routes[0].path: set twice (first on line 6)",
		},
		{
			name: "an empty list entry",
			yaml: minimal + "routes:\n  -\n  - {name: b, path: /b, upstream: http://u}\ntenants: [a, {name: t}]\n",
			want: "k.yaml:5: routes[0]: is an empty entry\nk.yaml:7: tenants[0]: must be a mapping, not \"a\"",
		},
		{
			name: "several at once",
			yaml: minimal + "lisen: :1\nworker:\n  concurency: 3\n",
			want: "k.yaml:4: lisen: unknown key; did you mean \"listen\"?\nk.yaml:6: worker.concurency: unknown key; did you mean \"concurrency\"?",
		},
		{
			name: "a key that is not a plain name is quoted",
			yaml: minimal + "worker:\n  \"con currency\": 3\n",
			want: `k.yaml:5: worker."con currency": unknown key; did you mean "concurrency"?`,
		},
		{
			name: "merged in from an anchor",
			yaml: minimal + "x: &d {lease: 1s}\n",
			want: "k.yaml:4: x: unknown key",
		},
		{
			name: "merged into the wrong block",
			yaml: minimal + "idempotency: &d {lease: 1s}\nworker:\n  <<: *d\n",
			want: "k.yaml:4: worker.lease: unknown key",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse([]byte(tc.yaml), "k.yaml", nil)
			if err == nil || err.Error() != tc.want {
				t.Errorf("err =\n%v\nwant\n%s", err, tc.want)
			}
		})
	}
}

func TestValues(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"a bare number is not a duration", "idempotency: {lease: 30}", `v.yaml:4: idempotency.lease: "30" is not a duration (use 30s)`},
		{"quoted bare number", `idempotency: {lease: "30"}`, `v.yaml:4: idempotency.lease: "30" is not a duration (use 30s)`},
		{"days", "idempotency: {retention: 7d}", `v.yaml:4: idempotency.retention: "7d" is not a duration (use 168h)`},
		{"words", "janitor: {interval: often}", `v.yaml:4: janitor.interval: "often" is not a duration (use a Go duration such as 30s, 5m or 1h30m)`},
		{"a list for a duration", "proxy: {dial_timeout: [1s]}", `v.yaml:4: proxy.dial_timeout: must be a duration such as 30s, not a list`},
		{"words for a number", "server: {max_header_bytes: lots}", `v.yaml:4: server.max_header_bytes: "lots" is not an integer`},
		{"a mapping for a string", "listen: {port: 80}", `v.yaml:4: listen: must be a string, not a mapping`},
		{"a string for a list", "tenants: acme", `v.yaml:4: tenants: must be a list, not "acme"`},
		{"a string for a mapping", "log: debug", `v.yaml:4: log: must be a mapping, not "debug"`},
		{"not a mapping at all", "- a\n- b", `v.yaml:1: the file must be a mapping of keys (listen, store, routes, ...), not a list`},
		{"YAML syntax", "listen: [", `v.yaml:4: did not find expected node content`},
		{"two documents", "---\nlisten: :1\n", `v.yaml:4: a second YAML document; the file must hold exactly one`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			data := minimal + tc.yaml + "\n"
			if strings.HasPrefix(tc.yaml, "- ") {
				data = tc.yaml + "\n"
			}
			_, err := Parse([]byte(data), "v.yaml", nil)
			if err == nil || err.Error() != tc.want {
				t.Errorf("err =\n%v\nwant\n%s", err, tc.want)
			}
		})
	}
}
