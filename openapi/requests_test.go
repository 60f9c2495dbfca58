package openapi_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3filter"

	"github.com/idemgate/idemgate/gateway/gatewaytest"
)

// TestDescribedRequestsAreAccepted: for keys and bodies at the edges of
// what the description allows, a request the description calls valid is
// the one the gateway accepts (202), and an invalid one is refused.
func TestDescribedRequestsAreAccepted(t *testing.T) {
	t.Parallel()
	api := describe(t, loadServed(t))
	srv := startDefault(t)
	type request struct {
		name, path, key, body string
	}
	inv := func(name, key, body string) request { return request{name, "/v1/invoices", key, body} }
	long := strings.Repeat("k", 255)
	tests := []request{
		// Keys, compat syntax (the default).
		inv("bare key", "8e03978e-40d5-43e8-bc93-6894a57f9324", invoice),
		inv("quoted key", `"quoted-8e03978e"`, invoice),
		inv("quoted key with comma and space", `"a, b c"`, invoice),
		inv("quoted key with escapes", `"a\"b\\c"`, invoice),
		inv("bare key of every allowed symbol", "!#$%&'()*+-./:;<=>?@[\\]^_`{|}~", invoice),
		inv("bare key of 255", long, invoice),
		inv("quoted key of 255", `"`+strings.Repeat("q", 255)+`"`, invoice),
		inv("bare key of 256", long+"k", invoice),
		inv("quoted key of 256", `"`+strings.Repeat("q", 256)+`"`, invoice),
		inv("empty quoted key", `""`, invoice),
		inv("list", "a,b", invoice),
		inv("bare key with a quote", `ab"c`, invoice),
		inv("bare key with a space", "a b", invoice),
		inv("unterminated", `"abc`, invoice),
		inv("parameters", `"abc";v=1`, invoice),
		inv("bad escape", `"a\xb"`, invoice),
		inv("non-ASCII", "clé", invoice),
		// Bodies.
		inv("largest amount", "b-1", `{"order_id":"o1","amount_cents":9223372036854775807,"currency":"EUR"}`),
		inv("id of 128", "b-2", `{"order_id":"`+strings.Repeat("o", 128)+`","amount_cents":1,"currency":"USD"}`),
		inv("id of 129", "b-3", `{"order_id":"`+strings.Repeat("o", 129)+`","amount_cents":1,"currency":"USD"}`),
		inv("id with a colon", "b-4", `{"order_id":"o:1","amount_cents":1,"currency":"EUR"}`),
		inv("id with a tab", "b-5", `{"order_id":"o\t1","amount_cents":1,"currency":"EUR"}`),
		inv("empty id", "b-6", `{"order_id":"","amount_cents":1,"currency":"EUR"}`),
		inv("missing field", "b-7", `{"order_id":"o1","currency":"EUR"}`),
		inv("unknown field", "b-8", `{"order_id":"o1","amount_cents":1,"currency":"EUR","note":"x"}`),
		inv("zero amount", "b-9", `{"order_id":"o1","amount_cents":0,"currency":"EUR"}`),
		inv("negative amount", "b-10", `{"order_id":"o1","amount_cents":-5,"currency":"EUR"}`),
		inv("fractional amount", "b-11", `{"order_id":"o1","amount_cents":1.5,"currency":"EUR"}`),
		inv("amount as text", "b-12", `{"order_id":"o1","amount_cents":"1","currency":"EUR"}`),
		inv("lower-case currency", "b-13", `{"order_id":"o1","amount_cents":1,"currency":"eur"}`),
		inv("four-letter currency", "b-14", `{"order_id":"o1","amount_cents":1,"currency":"EURO"}`),
		inv("null", "b-15", `null`),
		inv("array", "b-16", `[]`),
		inv("not JSON", "b-17", `order_id=o1`),
		{"stock out", "/v1/inventory/adjustments", "b-18", `{"adjustment_id":"a1","sku":"s1","delta":-3}`},
		{"no movement", "/v1/inventory/adjustments", "b-19", `{"adjustment_id":"a2","sku":"s1","delta":0}`},
		{"charge", "/v1/payments/charges", "b-20", `{"payment_id":"p1","amount_cents":1250,"currency":"EUR"}`},
		{"notification", "/v1/notifications", "b-21", `{"event_id":"e1","user_id":"u1","template":"welcome"}`},
		{"notification without template", "/v1/notifications", "b-22", `{"event_id":"e1","user_id":"u1"}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			mk := func() *http.Request {
				return newRequest(t, http.MethodPost, srv.Public.URL+tc.path, tc.body,
					"Authorization", bearer(gatewaytest.APIKey), "Idempotency-Key", tc.key, "Content-Type", "application/json")
			}
			req := mk()
			route, params, err := api.route(req)
			if err != nil {
				t.Fatal(err)
			}
			specErr := openapi3filter.ValidateRequest(t.Context(), &openapi3filter.RequestValidationInput{
				Request: req, PathParams: params, Route: route,
				Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc},
			})
			ex := send(t, srv.Public.Client(), mk())
			accepted := ex.resp.StatusCode == http.StatusAccepted
			switch {
			case specErr == nil && !accepted:
				t.Errorf("the description allows this request; the gateway answered %d: %s", ex.resp.StatusCode, ex.body)
			case specErr != nil && accepted:
				t.Errorf("the gateway accepted this request; the description refuses it: %v", specErr)
			}
			api.check(t, ex)
		})
	}
}
