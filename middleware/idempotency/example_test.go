package idempotency_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/middleware/idempotency/memstore"
)

// A library user wraps a payment handler. The retry with the same key is
// answered from the store; the handler runs once.
func Example() {
	charges := 0
	pay := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		charges++
		a, _ := idempotency.AttemptFrom(r.Context())
		w.Header().Set("Location", "/v1/payments/pay_1")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":"pay_1","fencing_token":%d}`, a.FencingToken)
	})
	mw, err := idempotency.New(memstore.New(), idempotency.Config{
		Route:  "payments",
		Tenant: func(r *http.Request) string { return r.Header.Get("X-Tenant") },
	})
	if err != nil {
		panic(err)
	}
	h := mw.Wrap(pay)

	for range 2 {
		r := httptest.NewRequest("POST", "/v1/payments", strings.NewReader(`{"amount":100}`))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Idempotency-Key", `"order-42"`)
		r.Header.Set("X-Tenant", "acme")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(w.Code, w.Header().Get("Idempotent-Replayed"), w.Body.String())
	}
	fmt.Println("charges:", charges)
	// Output:
	// 201  {"id":"pay_1","fencing_token":1}
	// 201 true {"id":"pay_1","fencing_token":1}
	// charges: 1
}
