package gateway

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/idemgate/idemgate/openapi"
)

// decodeBody reads a problem document from a body serve returned.
func decodeBody(t *testing.T, body string) openapi.Problem {
	t.Helper()
	var p openapi.Problem
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		t.Fatalf("not a problem document: %v: %s", err, body)
	}
	return p
}

// An empty Idempotency-Key names the key it refuses, the empty string as
// sent, as the other key problems name theirs.
func TestEmptyKeyProblemNamesTheKey(t *testing.T) {
	t.Parallel()
	g := echoGateway(t)
	for _, sent := range []string{"", " ", `""`} {
		r, body := serve(t, g.Handler(), http.MethodPost, "/v1/echo", "", "Authorization", "Bearer "+testAPIKey, "Idempotency-Key", sent)
		p := decodeBody(t, body)
		if r.StatusCode != http.StatusBadRequest || p.Type != "https://idemgate.dev/problems/idempotency-key-invalid" {
			t.Fatalf("key %q: %d %s, want 400 idempotency-key-invalid", sent, r.StatusCode, p.Type)
		}
		if p.IdempotencyKey == nil || *p.IdempotencyKey != "" {
			t.Errorf("key %q: idempotency_key %#v, want the empty string: %s", sent, p.IdempotencyKey, body)
		}
	}
}
