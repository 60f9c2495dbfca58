package client

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// TestRedirectsAreNotFollowed: a gateway address that answers 307 or 308
// to another host (here another port, and from https to plain http) must
// not make the client send the API key, the Idempotency-Key or the body
// there; the caller gets the redirect as a final error.
func TestRedirectsAreNotFollowed(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		status int
		tls    bool // the gateway address is https, the Location plain http
		own    bool // the caller passes its own http.Client, which follows redirects
		method string
	}{
		{"307 on POST, default client", http.StatusTemporaryRedirect, false, false, http.MethodPost},
		{"308 on POST, default client", http.StatusPermanentRedirect, false, false, http.MethodPost},
		{"307 on POST, the caller's client", http.StatusTemporaryRedirect, false, true, http.MethodPost},
		{"308 https to http, the caller's client", http.StatusPermanentRedirect, true, true, http.MethodPost},
		{"302 on GET, default client", http.StatusFound, false, false, http.MethodGet},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			var foreign []seen
			elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				mu.Lock()
				foreign = append(foreign, seen{method: r.Method, key: r.Header.Get("Idempotency-Key"), header: r.Header.Clone(), body: body})
				mu.Unlock()
				w.WriteHeader(http.StatusCreated)
			}))
			t.Cleanup(elsewhere.Close)
			redirect := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, elsewhere.URL+"/v1/payments", tc.status)
			})
			gw := httptest.NewUnstartedServer(redirect)
			if tc.tls {
				gw.StartTLS()
			} else {
				gw.Start()
			}
			t.Cleanup(gw.Close)

			opts := []Option{WithAPIKey("secret-api-key"), WithRetry(Retry{MaxAttempts: 3})}
			if tc.own {
				opts = append(opts, WithHTTPClient(gw.Client()))
			}
			c := New(gw.URL, opts...)
			resp, err := c.Do(t.Context(), tc.method, "/v1/payments", map[string]int{"amount_cents": 100}, WithKey("order-42"))

			var re *RedirectError
			if !errors.As(err, &re) {
				t.Fatalf("Do: err = %v, want a *RedirectError", err)
			}
			if re.Status != tc.status || re.Location != elsewhere.URL+"/v1/payments" {
				t.Errorf("RedirectError = %d to %q, want %d to %q", re.Status, re.Location, tc.status, elsewhere.URL+"/v1/payments")
			}
			if resp == nil || resp.Status != tc.status || resp.Attempts != 1 {
				t.Errorf("resp = %+v, want the %d after one attempt (a redirect is not retried)", resp, tc.status)
			}
			mu.Lock()
			defer mu.Unlock()
			for _, r := range foreign {
				t.Errorf("the redirect's target got %s with Authorization %q, Idempotency-Key %q, body %q", r.method, r.header.Get("Authorization"), r.key, r.body)
			}
		})
	}
}

// TestNotModifiedIsAnAnswer: a 3xx without a Location is not a redirect.
func TestNotModifiedIsAnAnswer(t *testing.T) {
	t.Parallel()
	g := newGateway(t, reply{status: http.StatusNotModified})
	resp, err := testClient(g, newClock()).Do(t.Context(), http.MethodGet, "/v1/jobs/j1", nil)
	if err != nil || resp.Status != http.StatusNotModified {
		t.Fatalf("Do = %+v, %v; want the 304 and no error", resp, err)
	}
}

// TestCallersClientIsLeftAsIs: the client does not change the
// http.Client a caller passes, which other code may share.
func TestCallersClientIsLeftAsIs(t *testing.T) {
	t.Parallel()
	hc := &http.Client{}
	New("http://gateway.example", WithHTTPClient(hc))
	if hc.CheckRedirect != nil {
		t.Error("WithHTTPClient changed the caller's CheckRedirect")
	}
}
