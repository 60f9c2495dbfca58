package gateway

import (
	"net/http"
	"testing"
)

func TestTableMatch(t *testing.T) {
	t.Parallel()
	post := map[string]bool{http.MethodPost: true}
	tbl := newTable([]*route{
		{name: "payments", methods: post, path: "/v1/payments", prefix: true},
		{name: "charges", methods: post, path: "/v1/payments/charges"},
		{name: "anything", path: "/v1", prefix: true},
		{name: "invoices", methods: post, path: "/v1/invoices"},
	})
	tests := []struct{ method, path, want string }{
		{"POST", "/v1/payments", "payments"},
		{"POST", "/v1/payments/pay_1", "payments"},
		{"POST", "/v1/payments/charges", "charges"},
		{"POST", "/v1/payments/charges/x", "payments"},
		{"POST", "/v1/paymentsX", "anything"},
		{"GET", "/v1/payments/charges", "anything"},
		{"POST", "/v1/invoices", "invoices"},
		{"POST", "/v1/invoices/1", "anything"},
		{"POST", "/v2", ""},
		{"GET", "/", ""},
	}
	for _, tc := range tests {
		got := ""
		if rt := tbl.match(tc.method, tc.path); rt != nil {
			got = rt.name
		}
		if got != tc.want {
			t.Errorf("%s %s matched %q, want %q", tc.method, tc.path, got, tc.want)
		}
	}
}
