package idempotency_test

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/middleware/idempotency/memstore"
)

// A payment handler behind the middleware, served over HTTP. The client's
// first request runs the handler; its retry with the same key and body gets
// the stored response, replayed: the handler ran once.
func ExampleMiddleware_Wrap() {
	pay := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, _ := idempotency.AttemptFrom(r.Context())
		// The token is the store's clock in microseconds, or one more than
		// the key's last token: an upstream stores it as a 64-bit integer.
		fmt.Printf("handler: charging %s under a fencing token: %v\n", a.Scope.Key, a.FencingToken > 0)
		w.Header().Set("Location", "/v1/payments/pay_1")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"id":"pay_1","status":"charged"}`)
	})
	mw, err := idempotency.New(memstore.New(), idempotency.Config{
		Route:  "payments",
		Tenant: func(r *http.Request) string { return r.Header.Get("X-Tenant") },
	})
	if err != nil {
		log.Fatal(err)
	}
	api := httptest.NewServer(mw.Wrap(pay))
	defer api.Close()

	for _, attempt := range []string{"first", "retry"} {
		req, err := http.NewRequest(http.MethodPost, api.URL+"/v1/payments", strings.NewReader(`{"amount":100}`))
		if err != nil {
			log.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", `"order-42"`)
		req.Header.Set("X-Tenant", "acme")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s: %d %s replayed=%q %s\n", attempt, resp.StatusCode, resp.Header.Get("Location"),
			resp.Header.Get("Idempotent-Replayed"), body)
	}
	// Output:
	// handler: charging order-42 under a fencing token: true
	// first: 201 /v1/payments/pay_1 replayed="" {"id":"pay_1","status":"charged"}
	// retry: 201 /v1/payments/pay_1 replayed="true" {"id":"pay_1","status":"charged"}
}
