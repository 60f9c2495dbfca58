package config

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestRouteOverrides(t *testing.T) {
	t.Parallel()
	cfg, err := Parse([]byte(minimal+`idempotency:
  methods: [post]
  lease: 10s
  fingerprint: {headers: [X-Account]}
routes:
  - name: open
    path: /open
    upstream: http://127.0.0.1:1
    idempotency: {methods: [], on_store_error: fail_open}
  - name: strict
    path: /strict
    upstream: http://127.0.0.1:1
    idempotency:
      key_syntax: strict
      wait_in_flight: 1s
      max_request_bytes: 10
      fingerprint: {json_fields: [/id]}
      on_ambiguous: hold
  - name: nulls
    path: /n
    upstream: http://127.0.0.1:1
    idempotency: {methods: ~, retention: ~, fingerprint: ~, lease: " 2s "}
  - name: merged
    path: /m
    upstream: http://127.0.0.1:1
    idempotency: &hold {<<: {on_ambiguous: hold, lease: 3s}, lease: 4s}
  - name: aliased
    path: /a
    upstream: http://127.0.0.1:1
    idempotency: *hold
`), "overrides.yaml", nil)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	open, _ := cfg.Route("open")
	if got := open.Idempotency; len(got.Methods) != 0 || got.OnStoreError != "fail_open" || got.Lease != 10*time.Second {
		t.Errorf("open: %+v; want no methods, fail_open and the default lease 10s", got)
	}
	strict, _ := cfg.Route("strict")
	got := strict.Idempotency
	if !slices.Equal(got.Methods, []string{"POST"}) || got.KeySyntax != "strict" || got.WaitInFlight != time.Second ||
		got.MaxRequestBytes != 10 || got.OnAmbiguous != "hold" || got.MaxKeyLength != 255 ||
		!slices.Equal(got.Fingerprint.Headers, []string{"X-Account"}) || !slices.Equal(got.Fingerprint.JSONFields, []string{"/id"}) {
		t.Errorf("strict: %+v", got)
	}
	got.Methods[0] = "DELETE"
	got.Fingerprint.Headers[0] = "X-Other"
	if top := cfg.Idempotency; top.Methods[0] != "POST" || top.Fingerprint.Headers[0] != "X-Account" {
		t.Error("changing a route's settings changed those it inherits from")
	}
	// A key written null is not written; merge keys and aliases are read
	// as the decoder reads them.
	nulls, _ := cfg.Route("nulls")
	if d := nulls.Idempotency; !slices.Equal(d.Methods, []string{"POST"}) || d.Retention != 24*time.Hour ||
		!slices.Equal(d.Fingerprint.Headers, []string{"X-Account"}) || d.Lease != 2*time.Second || d.Route != "nulls" {
		t.Errorf("nulls: %+v", d)
	}
	for _, name := range []string{"merged", "aliased"} {
		r, _ := cfg.Route(name)
		if d := r.Idempotency; d.OnAmbiguous != "hold" || d.Lease != 4*time.Second || d.Retention != 24*time.Hour {
			t.Errorf("%s: %+v", name, d)
		}
	}
	wantWarnings := []string{
		`auth.mode none: every request is tenant "anonymous"; unsafe for multi-tenant use`,
		"store memory: idempotency records live in this process only; a restart forgets them and other instances never see them",
		"routes[0] (open): on_store_error fail_open: while the store is unavailable requests run without idempotency protection",
		"routes[0] (open): idempotency.methods is empty: no request needs an Idempotency-Key",
	}
	if w := cfg.Warnings(); !slices.Equal(w, wantWarnings) {
		t.Errorf("Warnings() =\n%s\nwant\n%s", strings.Join(w, "\n"), strings.Join(wantWarnings, "\n"))
	}

	// Listeners that only clash when dev runs everything in one process.
	cfg, err = Parse([]byte(minimal+"listen: \":9100\"\nworker: {admin_listen: \"127.0.0.1:9100\"}\n"), "dev.yaml", nil, WithSettings(partnerSetting(new(string))))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	wantClashes := []string{
		`worker.admin_listen "127.0.0.1:9100" uses the same port as listen ":9100": idemgate dev cannot open both`,
		`worker.partner_url "127.0.0.1:9100" uses the same port as listen ":9100": idemgate dev cannot open both`,
	}
	if w := cfg.Warnings(); !slices.Equal(w[1:3], wantClashes) {
		t.Errorf("Warnings() = %q, want %q after the auth warning", w, wantClashes)
	}
}
