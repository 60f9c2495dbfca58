package openapi_test

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/gateway"
	"github.com/idemgate/idemgate/gateway/gatewaytest"
	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/middleware/idempotency/memstore"
)

// upstream is a service behind the gateway that records what it got.
type upstream struct {
	calls  atomic.Int64
	mu     sync.Mutex
	header http.Header
}

// got records r and reads its body: a server only notices that the
// client went away (and cancels r's context) once the body is read.
func (u *upstream) got(r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	u.calls.Add(1)
	u.mu.Lock()
	u.header = r.Header.Clone()
	u.mu.Unlock()
}

// startUpstream starts an upstream that records each request in up, then
// answers it with answer; it returns up and the upstream's URL.
func startUpstream(t *testing.T, answer http.HandlerFunc) (up *upstream, url string) {
	t.Helper()
	up = &upstream{}
	us := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		up.got(r)
		answer(w, r)
	}))
	t.Cleanup(us.Close)
	return up, us.URL
}

// startProxied starts a gateway whose route "payments" proxies
// /v1/payments to target.
func startProxied(t *testing.T, target string, change func(*gateway.RouteOptions)) *gatewaytest.Server {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	opts := gatewaytest.Options(gatewaytest.NewQueue(), memstore.New())
	ro := gateway.RouteOptions{Name: "payments", Methods: []string{http.MethodPost}, Path: "/v1/payments", Prefix: true, Upstream: u}
	if change != nil {
		change(&ro)
	}
	opts.Routes = append(opts.Routes, ro)
	return gatewaytest.Start(t, opts)
}

func charge(t *testing.T, srv *gatewaytest.Server, key string) exchange {
	t.Helper()
	return send(t, srv.Public.Client(), newRequest(t, http.MethodPost, srv.Public.URL+"/v1/payments", `{"amount_cents":1250,"currency":"EUR"}`,
		"Authorization", bearer(gatewaytest.APIKey), "Idempotency-Key", key, "Content-Type", "application/json"))
}

// TestProxiedResponsesMatchSpec validates a proxied route's answers
// against a service description built from the gateway's components
// (testdata/proxied.yaml).
func TestProxiedResponsesMatchSpec(t *testing.T) {
	t.Parallel()
	api := describe(t, loadFile(t, "testdata/proxied.yaml"))

	t.Run("201 and its replay", func(t *testing.T) {
		t.Parallel()
		up, upURL := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Location", "/charges/ch_1")
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, `{"id":"ch_1"}`)
		})
		srv := startProxied(t, upURL, nil)
		first := charge(t, srv, `"order-42"`)
		wantStatus(t, first, http.StatusCreated)
		api.check(t, first)
		up.mu.Lock()
		h := up.header
		up.mu.Unlock()
		// What the policy promises the upstream: the canonical key, scoped
		// to the tenant.
		if h.Get("Idempotency-Key") != gatewaytest.Tenant+":order-42" || !positive(h.Get("Idempotency-Fencing-Token")) ||
			h.Get("Idemgate-Tenant") != gatewaytest.Tenant || h.Get("Authorization") != "" {
			t.Errorf("the upstream got Idempotency-Key %q, Idempotency-Fencing-Token %q, Idemgate-Tenant %q, Authorization %q",
				h.Get("Idempotency-Key"), h.Get("Idempotency-Fencing-Token"), h.Get("Idemgate-Tenant"), h.Get("Authorization"))
		}
		replay := charge(t, srv, "order-42")
		wantStatus(t, replay, http.StatusCreated)
		api.check(t, replay)
		if replay.resp.Header.Get("Idempotent-Replayed") != "true" || replay.resp.Header.Get("Location") != "/charges/ch_1" || string(replay.body) != string(first.body) {
			t.Errorf("replay: %v %s", replay.resp.Header, replay.body)
		}
		if n := up.calls.Load(); n != 1 {
			t.Errorf("the upstream was called %d times, want once", n)
		}
	})

	t.Run("201 replayed without its body", func(t *testing.T) {
		t.Parallel()
		up, upURL := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, `{"id":"ch_big","receipt":"`+strings.Repeat("r", 200)+`"}`)
		})
		srv := startProxied(t, upURL, func(ro *gateway.RouteOptions) { ro.Idempotency.MaxStoredResponseBytes = 64 })
		first := charge(t, srv, "big")
		wantStatus(t, first, http.StatusCreated)
		api.check(t, first)
		if len(first.body) < 200 {
			t.Errorf("the first caller got %d bytes, want the whole body", len(first.body))
		}
		replay := charge(t, srv, "big")
		wantStatus(t, replay, http.StatusCreated)
		api.check(t, replay)
		if replay.resp.Header.Get("Idempotent-Body-Omitted") != "true" || replay.resp.Header.Get("Idempotent-Replayed") != "true" || len(replay.body) != 0 {
			t.Errorf("replay of an omitted body: %v %q", replay.resp.Header, replay.body)
		}
		if n := up.calls.Load(); n != 1 {
			t.Errorf("the upstream was called %d times, want once", n)
		}
	})

	t.Run("409 idempotency-key-in-use", func(t *testing.T) {
		t.Parallel()
		entered, release := make(chan struct{}), make(chan struct{})
		var once sync.Once
		_, upURL := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
			once.Do(func() { close(entered) })
			select {
			case <-release:
			case <-r.Context().Done():
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, `{"id":"ch_slow"}`)
		})
		srv := startProxied(t, upURL, nil)
		done := sendAsync(t, srv.Public.Client(), newRequest(t, http.MethodPost, srv.Public.URL+"/v1/payments", `{"amount_cents":1250,"currency":"EUR"}`,
			"Authorization", bearer(gatewaytest.APIKey), "Idempotency-Key", "slow", "Content-Type", "application/json"))
		<-entered
		ex := charge(t, srv, "slow")
		close(release)
		wantProblem(t, ex, http.StatusConflict, "idempotency-key-in-use")
		api.check(t, ex)
		if orig := <-done; orig.resp != nil {
			wantStatus(t, orig, http.StatusCreated)
			api.check(t, orig)
		}
	})

	t.Run("502 upstream-unavailable", func(t *testing.T) {
		t.Parallel()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		closed := "http://" + ln.Addr().String()
		_ = ln.Close()
		srv := startProxied(t, closed, nil)
		for range 2 { // released: the retry tries again
			ex := charge(t, srv, "unreachable")
			wantProblem(t, ex, http.StatusBadGateway, "upstream-unavailable")
			api.check(t, ex)
		}
	})

	t.Run("504 upstream-timeout", func(t *testing.T) {
		t.Parallel()
		stop := make(chan struct{})
		up, upURL := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
			select { // never answers
			case <-r.Context().Done():
			case <-stop:
			}
		})
		t.Cleanup(func() { close(stop) })
		srv := startProxied(t, upURL, func(ro *gateway.RouteOptions) { ro.Timeout = 100 * time.Millisecond })
		for range 2 { // on_ambiguous: release, so the retry runs again
			ex := charge(t, srv, "hangs")
			wantProblem(t, ex, http.StatusGatewayTimeout, "upstream-timeout")
			api.check(t, ex)
		}
		if n := up.calls.Load(); n != 2 {
			t.Errorf("the upstream was called %d times, want twice (the key is released)", n)
		}
	})
}

// TestUpstreamStatusesThatReleaseTheKey: the statuses the policy lists
// as "not processed" make the retry run again; any other answer is stored.
func TestUpstreamStatusesThatReleaseTheKey(t *testing.T) {
	t.Parallel()
	for _, status := range []int{200, 201, 400, 404, 408, 409, 422, 425, 429, 500, 502, 503, 504} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			t.Parallel()
			up, upURL := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(status)
			})
			srv := startProxied(t, upURL, nil)
			for range 2 {
				wantStatus(t, charge(t, srv, "k"), status)
			}
			want := int64(1)
			if idempotency.ReleasesKey(status) {
				want = 2
			}
			if n := up.calls.Load(); n != want {
				t.Errorf("after two requests with one key the upstream ran %d times, want %d", n, want)
			}
		})
	}
}

// positive reports whether a fencing token header holds a positive 64-bit
// integer: the store's clock in microseconds on a key's first claim.
func positive(token string) bool {
	n, err := strconv.ParseInt(token, 10, 64)
	return err == nil && n > 0
}
