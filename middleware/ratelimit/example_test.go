package ratelimit_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/idemgate/idemgate/middleware/ratelimit"
)

func Example() {
	lim, err := ratelimit.New(ratelimit.Limits{
		"acme": {Tokens: 2, Interval: time.Hour},
	}, ratelimit.MemoryStore, ratelimit.Config{
		// In a gateway: the tenant that authentication established.
		Key: func(r *http.Request) string { return r.Header.Get("X-Tenant") },
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lim.Close(context.Background())

	h := lim.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "hello")
	}))
	for _, tenant := range []string{"acme", "acme", "acme", "globex"} {
		r := httptest.NewRequest(http.MethodPost, "/v1/payments", nil)
		r.Header.Set("X-Tenant", tenant)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Printf("%s: %d limit=%q remaining=%q retry-after-set=%t %s\n", tenant, w.Code,
			w.Header().Get("RateLimit-Limit"), w.Header().Get("RateLimit-Remaining"),
			w.Header().Get("Retry-After") != "", w.Header().Get("Content-Type"))
	}
	// Output:
	// acme: 200 limit="2" remaining="1" retry-after-set=false text/plain; charset=utf-8
	// acme: 200 limit="2" remaining="0" retry-after-set=false text/plain; charset=utf-8
	// acme: 429 limit="2" remaining="0" retry-after-set=true application/problem+json
	// globex: 200 limit="" remaining="" retry-after-set=false text/plain; charset=utf-8
}
