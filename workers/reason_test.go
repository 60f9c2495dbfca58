package workers

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestRedactURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"https://ship.internal/hooks", "https://ship.internal/hooks"},
		{"https://ship.internal:8443/hooks?token=s3cret", "https://ship.internal:8443/hooks?REDACTED"},
		{"https://ops:hunter2@ship.internal/hooks?token=s3cret&x=1", "https://ops:xxxxx@ship.internal/hooks?REDACTED"},
		{"https://ship.internal/hooks?", "https://ship.internal/hooks?REDACTED"},
		{"https://ship.internal/hooks#access_token=s3cret", "https://ship.internal/hooks#REDACTED"},
		{"://no scheme", "(unparsable)"},
	} {
		if got := redactURL(tc.in); got != tc.want {
			t.Errorf("redactURL(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestDeliverPublicReason: what a job's tenant reads of a failed delivery
// names neither the URL (its host, user, password or query) nor the
// receiver's answer, while the error operators read keeps them, the
// credentials masked.
func TestDeliverPublicReason(t *testing.T) {
	t.Parallel()
	const body = "panic: pq: password authentication failed for db.internal:5432"
	answer := func(status int) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(status)
			io.WriteString(w, body)
		}
	}
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	for _, tc := range []struct {
		name    string
		url     string // "" for a receiver answering with status
		status  int
		timeout time.Duration
		public  string
		detail  string // in the operators' error
	}{
		{name: "500", status: 500, public: "receiver answered 500", detail: "answered 500: " + body},
		{name: "503", status: 503, public: "receiver unavailable (answered 503)", detail: "answered 503"},
		{name: "400", status: 400, public: "receiver refused the job (answered 400)", detail: "answered 400: " + body},
		{name: "302", status: 302, public: "receiver answered 302 (redirects are not followed)", detail: "answered 302"},
		{name: "unreachable", url: closed.URL, public: "receiver unreachable", detail: "connect"},
		{name: "timed out", status: -1, timeout: 50 * time.Millisecond, public: "receiver timed out", detail: "no answer within 50ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			base := tc.url
			if base == "" {
				h := answer(tc.status)
				if tc.status < 0 {
					h = func(http.ResponseWriter, *http.Request) { time.Sleep(time.Second) }
				}
				srv := httptest.NewServer(h)
				t.Cleanup(srv.Close)
				base = srv.URL
			}
			hostPort := strings.TrimPrefix(base, "http://")
			url := "http://ops:pw-hunter2@" + hostPort + "/hooks?token=tok-s3cret"
			_, err := Deliver(HTTPDelivery{URL: url, Timeout: tc.timeout})(t.Context(), deliveryJob(1, 7))
			if err == nil {
				t.Fatal("deliver succeeded")
			}
			public := publicReason(err)
			if public != tc.public {
				t.Errorf("public reason = %q, want %q", public, tc.public)
			}
			_, port, _ := net.SplitHostPort(hostPort)
			for _, never := range []string{"tok-s3cret", "pw-hunter2", "ops", port, "db.internal", "pq:"} {
				if strings.Contains(public, never) {
					t.Errorf("public reason %q shows %q", public, never)
				}
			}
			detail := err.Error()
			if !strings.Contains(detail, tc.detail) || !strings.Contains(detail, hostPort+"/hooks?REDACTED") {
				t.Errorf("operators' error %q, want %q and the URL with its query masked", detail, tc.detail)
			}
			if strings.Contains(detail, "tok-s3cret") || strings.Contains(detail, "pw-hunter2") {
				t.Errorf("operators' error %q shows a credential of the URL", detail)
			}
		})
	}
}

func TestPublicReasonOfGoHandlerErrors(t *testing.T) {
	t.Parallel()
	secret := errors.New("dial tcp 10.0.3.7:5432: password=hunter2")
	for _, tc := range []struct {
		err  error
		want string
	}{
		{secret, reasonFailed},
		{Permanent(secret), reasonPermanent},
		{Unavailable(secret), reasonUnavailable},
		{&RetryAfterError{After: time.Second, Err: Unavailable(secret)}, reasonUnavailable},
		{Permanent(&reasoned{reason: "receiver refused the job (answered 400)", err: secret}), "receiver refused the job (answered 400)"},
	} {
		if got := publicReason(tc.err); got != tc.want {
			t.Errorf("publicReason(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}
