package config

import (
	"strings"
	"testing"

	"github.com/idemgate/idemgate/middleware/idempotency"
)

// TestForwardKey: idempotency.forward_key says which Idempotency-Key an
// upstream receives; a route may choose its own, and a misspelt value is
// refused with its line instead of silently forwarding the unscoped key.
func TestForwardKey(t *testing.T) {
	t.Parallel()
	cfg, err := Parse([]byte(minimal+`routes:
  - {name: scoped, path: /scoped, upstream: http://127.0.0.1:1}
  - {name: partner, path: /partner, upstream: http://127.0.0.1:1, idempotency: {forward_key: as_sent}}
`), "forward.yaml", nil)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	for name, want := range map[string]idempotency.ForwardKeyPolicy{"scoped": idempotency.ForwardTenantScoped, "partner": idempotency.ForwardAsSent} {
		r, _ := cfg.Route(name)
		if got := r.Idempotency.ForwardKey; got != want {
			t.Errorf("route %s: forward_key %q, want %q", name, got, want)
		}
	}

	cfg, err = Parse([]byte(minimal+`idempotency: {forward_key: as_sent}
routes:
  - {name: inherits, path: /i, upstream: http://127.0.0.1:1}
  - {name: back, path: /b, upstream: http://127.0.0.1:1, idempotency: {forward_key: tenant_scoped}}
`), "forward.yaml", nil)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if r, _ := cfg.Route("inherits"); r.Idempotency.ForwardKey != "as_sent" {
		t.Errorf("inherits: forward_key %q, want the default as_sent", r.Idempotency.ForwardKey)
	}
	if r, _ := cfg.Route("back"); r.Idempotency.ForwardKey != "tenant_scoped" {
		t.Errorf("back: forward_key %q, want its own tenant_scoped", r.Idempotency.ForwardKey)
	}

	_, err = Parse([]byte(minimal+`idempotency: {forward_key: raw}
routes:
  - {name: r, path: /r, upstream: http://127.0.0.1:1, idempotency: {forward_key: tenant}}
`), "x.yaml", nil)
	want := []string{
		`x.yaml:4: idempotency.forward_key: "raw" is not tenant_scoped or as_sent`,
		`x.yaml:6: routes[0].idempotency.forward_key: "tenant" is not tenant_scoped or as_sent`,
	}
	if err == nil || strings.Join(want, "\n") != err.Error() {
		t.Errorf("problems:\n%v\nwant:\n%s", err, strings.Join(want, "\n"))
	}
}
