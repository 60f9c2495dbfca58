package client

import (
	"fmt"
	"net/http"
)

// RedirectError is a 3xx answer that names another location. The client
// never follows one: following would send the API key, the body and the
// Idempotency-Key to wherever the Location points (another host, a plain
// http URL), and that host's answer would come back as the gateway's. An
// idemgate gateway does not redirect its API, so a redirect means a
// misconfigured base URL or a hop in between that should not be there.
// It is final: Do does not retry it.
type RedirectError struct {
	Status int
	// Location is the answer's Location header as sent, unresolved.
	Location string
}

func (e *RedirectError) Error() string {
	return fmt.Sprintf("idemgate: %d %s to %q not followed: fix the base URL", e.Status, http.StatusText(e.Status), e.Location)
}

// isRedirect reports whether an answer is a redirect the client refuses:
// a 3xx with a Location (a 304 Not Modified names none and is an answer).
func isRedirect(status int, h http.Header) bool {
	return status >= 300 && status < 400 && h.Get("Location") != ""
}

// noRedirects returns the answer to a redirect instead of following it.
func noRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// withoutRedirects is hc with redirects returned, not followed; hc itself,
// perhaps shared with other code, is left as it is.
func withoutRedirects(hc *http.Client) *http.Client {
	c := *hc
	c.CheckRedirect = noRedirects
	return &c
}
