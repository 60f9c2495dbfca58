package workers

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/hibiken/asynq"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/workers/fence"
)

const (
	deliveryJobID   = "job_01JDELIVERY"
	deliveryPayload = `{"order_id": "o-1", "note": "<fragile> & heavy"}`
	// staticKey is a static header's value: a credential that must never
	// show in an error.
	staticKey = "static-api-key-4711"
)

// Two secrets, as while one rotates: the Standard Webhooks test vector's
// and another.
var (
	vectorSecret = mustDecodeSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	newerSecret  = []byte("the-rotated-in-secret-0123456789")
)

func mustDecodeSecret(s string) []byte {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, "whsec_"))
	if err != nil {
		panic(err)
	}
	return key
}

// deliveryJob is the job of attempt with token, as Handle would pass it.
func deliveryJob(attempt int, token int64) Job[json.RawMessage] {
	return Job[json.RawMessage]{
		Key:      "shipment:o-1",
		Tenant:   "acme",
		Resource: "order:o-1",
		Payload:  json.RawMessage(deliveryPayload),
		Token:    token,
		Attempt:  attempt,
		Task: asynq.NewTaskWithHeaders("shipment.book", []byte(deliveryPayload),
			map[string]string{job.HeaderID: deliveryJobID, job.HeaderTenant: "acme"}),
	}
}

// received is a request as the receiver saw it.
type received struct {
	method string
	header http.Header
	body   []byte
}

// newReceiver starts a receiver that records every request and then
// answers with answer.
func newReceiver(t *testing.T, answer http.HandlerFunc) (*httptest.Server, <-chan received) {
	t.Helper()
	got := make(chan received, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		got <- received{method: r.Method, header: r.Header.Clone(), body: body}
		answer(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, got
}

// verifies checks a Standard Webhooks v1 signature the way a receiver
// does, independently of the code under test: HMAC-SHA256 of
// "{webhook-id}.{webhook-timestamp}.{body}", compared with each
// space-separated "v1,<base64>" entry.
func verifies(key []byte, h http.Header, body []byte) bool {
	mac := hmac.New(sha256.New, key)
	fmt.Fprintf(mac, "%s.%s.%s", h.Get("webhook-id"), h.Get("webhook-timestamp"), body)
	want := mac.Sum(nil)
	for _, entry := range strings.Fields(h.Get("webhook-signature")) {
		version, b64, ok := strings.Cut(entry, ",")
		got, err := base64.StdEncoding.DecodeString(b64)
		if ok && version == "v1" && err == nil && hmac.Equal(got, want) {
			return true
		}
	}
	return false
}

func TestDeliverSignatureMatchesStandardWebhooksVector(t *testing.T) {
	t.Parallel()
	// The test vector published with the Standard Webhooks specification.
	got := signatures([][]byte{vectorSecret}, "msg_p5jXN8AQM9LWM0D4loKWxJek", "1614265330", []byte(`{"test": 2432232314}`))
	if want := "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="; got != want {
		t.Fatalf("signature = %s, want %s", got, want)
	}
}

func TestDeliverRequest(t *testing.T) {
	t.Parallel()
	// Half a second past the minute: both timestamps say the whole second.
	now := time.Date(2026, 12, 3, 8, 0, 0, 500_000_000, time.UTC)
	traceID := trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36}
	spanID := trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7}
	withSpan := func(ctx context.Context) context.Context {
		return trace.ContextWithSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: traceID, SpanID: spanID, TraceFlags: trace.FlagsSampled,
		}))
	}

	tests := []struct {
		name            string
		secrets         [][]byte
		ctx             func(context.Context) context.Context
		wantSigs        int
		wantTraceparent string
	}{
		{
			name: "two secrets while one rotates, with a span", secrets: [][]byte{vectorSecret, newerSecret},
			ctx: withSpan, wantSigs: 2, wantTraceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		},
		{
			name: "one secret, no span", secrets: [][]byte{newerSecret},
			ctx: func(ctx context.Context) context.Context { return ctx }, wantSigs: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv, got := newReceiver(t, func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				io.WriteString(w, `{"result_ref":"shp_1"}`)
			})
			deliver := Deliver(HTTPDelivery{
				URL:     srv.URL + "/hooks/shipments",
				Secrets: tt.secrets,
				Headers: map[string]string{
					"X-Api-Key": staticKey,
					// None of these may replace the protocol's own.
					"idempotency-key":           "forged-key",
					"Idempotency-Fencing-Token": "999",
					"Idemgate-Tenant":           "other-tenant",
					"Webhook-Signature":         "v1,Zm9yZ2Vk",
					"webhook-id":                "forged-id",
					"Content-Type":              "text/plain",
					"traceparent":               "00-ffffffffffffffffffffffffffffffff-ffffffffffffffff-01",
				},
				Now: func() time.Time { return now },
			})

			ref, err := deliver(tt.ctx(t.Context()), deliveryJob(2, 7))
			if err != nil || ref != "shp_1" {
				t.Fatalf("deliver = %q, %v; want shp_1, nil", ref, err)
			}
			req := <-got
			if req.method != http.MethodPost {
				t.Errorf("method = %s, want POST", req.method)
			}
			wantBody := `{"type":"shipment.book","timestamp":"2026-12-03T08:00:00Z","job_id":"job_01JDELIVERY",` +
				`"tenant":"acme","business_key":"shipment:o-1","attempt":2,"fencing_token":"7",` +
				`"data":` + deliveryPayload + `}`
			if string(req.body) != wantBody {
				t.Errorf("body =\n%s\nwant\n%s", req.body, wantBody)
			}
			wantHeaders := map[string]string{
				"Content-Type":              "application/json",
				"Webhook-Id":                deliveryJobID,
				"Webhook-Timestamp":         strconv.FormatInt(time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC).Unix(), 10),
				"Idempotency-Key":           "shipment:o-1",
				"Idempotency-Fencing-Token": "7",
				"Idemgate-Tenant":           "acme",
				"Idemgate-Task":             "shipment.book",
				"Idemgate-Attempt":          "2",
				"X-Api-Key":                 staticKey,
				"Traceparent":               tt.wantTraceparent,
			}
			for name, want := range wantHeaders {
				values := req.header.Values(name)
				if want == "" {
					if len(values) != 0 {
						t.Errorf("%s = %q, want none", name, values)
					}
					continue
				}
				if len(values) != 1 || values[0] != want {
					t.Errorf("%s = %q, want exactly %q", name, values, want)
				}
			}
			sigs := strings.Fields(req.header.Get("webhook-signature"))
			if len(sigs) != tt.wantSigs {
				t.Fatalf("webhook-signature has %d signatures (%q), want %d", len(sigs), sigs, tt.wantSigs)
			}
			for i, key := range tt.secrets {
				one := req.header.Clone()
				one.Set("webhook-signature", sigs[i])
				if !verifies(key, one, req.body) {
					t.Errorf("signature %d (%s) does not verify with secret %d", i+1, sigs[i], i+1)
				}
			}
			if verifies([]byte("some-other-secret"), req.header, req.body) {
				t.Error("the signature verifies with a secret that was not configured")
			}
			tampered := append([]byte(nil), req.body...)
			tampered[len(tampered)-2] = ' '
			if verifies(tt.secrets[0], req.header, tampered) {
				t.Error("the signature verifies a body that was changed")
			}
		})
	}
}

func TestDeliverSameIdentityOnEveryAttempt(t *testing.T) {
	t.Parallel()
	srv, got := newReceiver(t, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	deliver := Deliver(HTTPDelivery{URL: srv.URL, Secrets: [][]byte{newerSecret}})
	var reqs []received
	for _, a := range []struct {
		attempt int
		token   int64
	}{{1, 7}, {2, 9}} {
		if _, err := deliver(t.Context(), deliveryJob(a.attempt, a.token)); err != nil {
			t.Fatalf("attempt %d: %v", a.attempt, err)
		}
		reqs = append(reqs, <-got)
	}
	for _, name := range []string{"webhook-id", "Idempotency-Key", "Idemgate-Tenant"} {
		if a, b := reqs[0].header.Get(name), reqs[1].header.Get(name); a != b || a == "" {
			t.Errorf("%s differs between attempts: %q, %q", name, a, b)
		}
	}
	for _, name := range []string{"Idemgate-Attempt", "Idempotency-Fencing-Token"} {
		if a, b := reqs[0].header.Get(name), reqs[1].header.Get(name); a == b {
			t.Errorf("%s is %q on both attempts", name, a)
		}
	}
}

// outcome is how the framework reads a business function's error.
type outcome int

const (
	succeeded outcome = iota
	transient
	unavailable // transient, the attempt not counted
	permanent
	superseded
)

func TestDeliverAnswers(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)
	tests := []struct {
		name    string
		status  int
		header  map[string]string
		body    string
		want    outcome
		wantRef string
		// wantAfter is the Retry-After the error carries; 0 for none.
		wantAfter time.Duration
		// wantMsg are parts of the error's message after the URL.
		wantMsg []string
	}{
		{name: "200 with result_ref", status: 200, body: `{"result_ref":"shp_1","other":1}`, want: succeeded, wantRef: "shp_1"},
		{name: "201 with Location", status: 201, header: map[string]string{"Location": "/shipments/s-9"}, body: `{"id":"s-9"}`, want: succeeded, wantRef: "/shipments/s-9"},
		{name: "result_ref wins over Location", status: 201, header: map[string]string{"Location": "/shipments/s-9"}, body: `{"result_ref":"shp_2"}`, want: succeeded, wantRef: "shp_2"},
		{name: "2xx without a reference", status: 202, body: `accepted`, want: succeeded, wantRef: "http:202"},
		{name: "result_ref not a string", status: 200, body: `{"result_ref":12}`, want: succeeded, wantRef: "http:200"},
		{name: "204", status: 204, want: succeeded, wantRef: "http:204"},

		{name: "503", status: 503, body: "down for maintenance", want: unavailable, wantMsg: []string{"answered 503: down for maintenance"}},
		{name: "500", status: 500, want: transient, wantMsg: []string{"answered 500"}},
		{name: "501", status: 501, want: transient},
		{name: "507", status: 507, want: transient},
		{name: "500, Retry-After", status: 500, header: map[string]string{"Retry-After": "3"}, want: transient, wantAfter: 3 * time.Second},
		{name: "502", status: 502, want: unavailable},
		{name: "504", status: 504, want: unavailable},
		{name: "408", status: 408, want: unavailable},
		{name: "425", status: 425, want: unavailable},
		{name: "429 without Retry-After", status: 429, want: unavailable},
		{name: "429, Retry-After seconds", status: 429, header: map[string]string{"Retry-After": "2"}, want: unavailable, wantAfter: 2 * time.Second, wantMsg: []string{"answered 429", "retry after 2s"}},
		{name: "503, Retry-After HTTP-date", status: 503, header: map[string]string{"Retry-After": now.Add(90 * time.Second).Format(http.TimeFormat)}, want: unavailable, wantAfter: 90 * time.Second},
		{name: "Retry-After beyond the bound", status: 503, header: map[string]string{"Retry-After": "604800"}, want: unavailable, wantAfter: DefaultDeliveryMaxRetryAfter},
		{name: "Retry-After beyond int64", status: 429, header: map[string]string{"Retry-After": "99999999999999999999999"}, want: unavailable, wantAfter: DefaultDeliveryMaxRetryAfter},
		{name: "Retry-After date in the past", status: 503, header: map[string]string{"Retry-After": now.Add(-time.Minute).Format(http.TimeFormat)}, want: unavailable},
		{name: "Retry-After malformed", status: 503, header: map[string]string{"Retry-After": "soon"}, want: unavailable},

		{name: "409 stale", status: 409, header: map[string]string{"Idemgate-Stale": "true"}, body: "superseded", want: superseded},
		{name: "409 stale, any case", status: 409, header: map[string]string{"Idemgate-Stale": "True"}, want: superseded},
		{name: "409 without the stale mark", status: 409, body: "conflict", want: permanent, wantMsg: []string{"answered 409: conflict"}},
		{name: "400", status: 400, body: `{"error":"missing field order_id"}`, want: permanent, wantMsg: []string{`answered 400: {"error":"missing field order_id"}`}},
		{name: "404", status: 404, want: permanent, wantMsg: []string{"answered 404"}},
		{name: "422 ignores Retry-After", status: 422, header: map[string]string{"Retry-After": "5"}, want: permanent},
		{name: "304", status: 304, want: permanent},
		{name: "long body is clipped", status: 400, body: strings.Repeat("é", 300), want: permanent, wantMsg: []string{": " + strings.Repeat("é", 256) + "…"}},
		{name: "invalid UTF-8 in the body", status: 400, body: "bad \xff\xfe field", want: permanent, wantMsg: []string{"answered 400: bad \uFFFD field"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv, _ := newReceiver(t, func(w http.ResponseWriter, _ *http.Request) {
				for k, v := range tt.header {
					w.Header().Set(k, v)
				}
				w.WriteHeader(tt.status)
				io.WriteString(w, tt.body)
			})
			url := srv.URL + "/hooks/shipments"
			deliver := Deliver(HTTPDelivery{
				URL:     url,
				Secrets: [][]byte{vectorSecret},
				Headers: map[string]string{"X-Api-Key": staticKey},
				Now:     func() time.Time { return now },
			})
			ref, err := deliver(t.Context(), deliveryJob(1, 7))
			if tt.want == succeeded {
				if err != nil || ref != tt.wantRef {
					t.Fatalf("deliver = %q, %v; want %q, nil", ref, err, tt.wantRef)
				}
				return
			}
			if err == nil {
				t.Fatalf("deliver = %q, nil; want an error", ref)
			}
			msg := err.Error()
			if strings.Contains(msg, staticKey) || strings.Contains(msg, string(vectorSecret)) ||
				strings.Contains(msg, base64.StdEncoding.EncodeToString(vectorSecret)) {
				t.Fatalf("error leaks a secret or a static header: %s", msg)
			}
			if !utf8.ValidString(msg) {
				t.Fatalf("error is not valid UTF-8: %q", msg)
			}
			if IsPermanent(err) != (tt.want == permanent) {
				t.Fatalf("IsPermanent(%v) = %v, want %v", err, IsPermanent(err), tt.want == permanent)
			}
			if IsUnavailable(err) != (tt.want == unavailable) {
				t.Fatalf("IsUnavailable(%v) = %v, want %v", err, IsUnavailable(err), tt.want == unavailable)
			}
			if stale := errors.Is(err, fence.ErrStaleToken); stale != (tt.want == superseded) {
				t.Fatalf("errors.Is(%v, fence.ErrStaleToken) = %v, want %v", err, stale, tt.want == superseded)
			}
			if tt.want != superseded && !strings.Contains(msg, url+" answered "+strconv.Itoa(tt.status)) {
				t.Errorf("error %q does not name the URL and the status", msg)
			}
			for _, part := range tt.wantMsg {
				if !strings.Contains(msg, part) {
					t.Errorf("error %q does not contain %q", msg, part)
				}
			}

			ra, isRA := errors.AsType[*RetryAfterError](err)
			if isRA != (tt.wantAfter > 0) || (isRA && ra.After != tt.wantAfter) {
				t.Fatalf("RetryAfterError = %v (%v), want After %s", ra, isRA, tt.wantAfter)
			}
			if tt.wantAfter > 0 {
				// As asynq sees it, wrapped by the handler; a jitter of 0
				// shows the floor.
				b := Backoff{Rand: func(int64) int64 { return 0 }}
				wrapped := fmt.Errorf("workers: shipment.book shipment:o-1 attempt 1: %w", err)
				if d := b.RetryDelay(0, wrapped, nil); d < tt.wantAfter {
					t.Fatalf("RetryDelay = %s, sooner than Retry-After %s", d, tt.wantAfter)
				}
			}
		})
	}
}

func TestDeliverDoesNotFollowRedirects(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		client *http.Client
	}{
		{name: "default client"},
		{name: "a caller's client that would follow", client: &http.Client{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var followed atomic.Int64
			mux := http.NewServeMux()
			mux.HandleFunc("/hook", func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, "/elsewhere", http.StatusFound)
			})
			mux.HandleFunc("/elsewhere", func(w http.ResponseWriter, _ *http.Request) {
				followed.Add(1)
				io.WriteString(w, `{"result_ref":"wrong place"}`)
			})
			srv := httptest.NewServer(mux)
			t.Cleanup(srv.Close)

			ref, err := Deliver(HTTPDelivery{URL: srv.URL + "/hook", Client: tt.client})(t.Context(), deliveryJob(1, 7))
			if !IsPermanent(err) || !strings.Contains(err.Error(), "answered 302") {
				t.Fatalf("deliver = %q, %v; want a permanent error naming 302", ref, err)
			}
			if n := followed.Load(); n != 0 {
				t.Fatalf("the redirect target was requested %d times", n)
			}
		})
	}
}

func TestDeliverTimeoutCancelsTheRequest(t *testing.T) {
	t.Parallel()
	srv, _, cancelled := stallingReceiver(t)

	_, err := Deliver(HTTPDelivery{URL: srv.URL, Timeout: 50 * time.Millisecond})(t.Context(), deliveryJob(1, 7))
	if err == nil || IsPermanent(err) || !IsUnavailable(err) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("deliver = %v; want an unavailable receiver, a deadline error", err)
	}
	if !strings.Contains(err.Error(), "no answer within 50ms") {
		t.Errorf("error %q does not say the receiver did not answer in time", err)
	}
	if t.Context().Err() != nil {
		t.Fatal("the caller's context ended: the timeout must be the attempt's own")
	}
	waitClosed(t, cancelled, "the receiver to see its request cancelled")
}

func TestDeliverCancelledContextCancelsTheRequest(t *testing.T) {
	t.Parallel()
	lost := errors.New("lock lost")
	tests := []struct {
		name   string
		cancel func(context.CancelCauseFunc)
		want   []error
	}{
		{name: "shutdown", cancel: func(c context.CancelCauseFunc) { c(nil) }, want: []error{context.Canceled}},
		{name: "lock lost, with a cause", cancel: func(c context.CancelCauseFunc) { c(lost) }, want: []error{context.Canceled, lost}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv, arrived, cancelled := stallingReceiver(t)

			ctx, cancel := context.WithCancelCause(t.Context())
			defer cancel(nil)
			errc := make(chan error, 1)
			go func() {
				_, err := Deliver(HTTPDelivery{URL: srv.URL})(ctx, deliveryJob(1, 7))
				errc <- err
			}()
			waitClosed(t, arrived, "the request to arrive")
			tt.cancel(cancel)
			waitClosed(t, cancelled, "the receiver to see its request cancelled")
			err := <-errc
			if err == nil || IsPermanent(err) {
				t.Fatalf("deliver = %v; want a transient error", err)
			}
			if IsUnavailable(err) {
				t.Fatalf("deliver = %v; our own cancellation says nothing about the receiver", err)
			}
			for _, want := range tt.want {
				if !errors.Is(err, want) {
					t.Errorf("errors.Is(%v, %v) = false", err, want)
				}
			}
		})
	}
}

func TestDeliverReadsTheAnswerUpToTheLimit(t *testing.T) {
	t.Parallel()
	// result_ref sits after 2 KiB of padding: a reader that stops at
	// 1 KiB never sees it.
	body := `{"pad":"` + strings.Repeat("x", 2048) + `","result_ref":"late"}`
	tests := []struct {
		name  string
		limit int64
		want  string
	}{
		{name: "1 KiB limit", limit: 1024, want: "http:200"},
		{name: "default limit", want: "late"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv, _ := newReceiver(t, func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, body) })
			ref, err := Deliver(HTTPDelivery{URL: srv.URL, MaxResponseBytes: tt.limit})(t.Context(), deliveryJob(1, 7))
			if err != nil || ref != tt.want {
				t.Fatalf("deliver = %q, %v; want %q", ref, err, tt.want)
			}
		})
	}
}

func TestDeliverDroppedConnectionIsTransient(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		conn.Close() // no answer at all
	}))
	t.Cleanup(srv.Close)

	_, err := Deliver(HTTPDelivery{URL: srv.URL})(t.Context(), deliveryJob(1, 7))
	if err == nil || IsPermanent(err) || !IsUnavailable(err) || errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("deliver = %v; want an unavailable receiver", err)
	}
	if _, ok := errors.AsType[*RetryAfterError](err); ok {
		t.Fatalf("deliver = %v; a dropped connection asks for no delay", err)
	}
}

func TestDeliverConnectionRefusedIsUnavailable(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	srv.Close() // nobody listens any more
	_, err := Deliver(HTTPDelivery{URL: srv.URL})(t.Context(), deliveryJob(1, 7))
	if err == nil || IsPermanent(err) || !IsUnavailable(err) {
		t.Fatalf("deliver = %v; want an unavailable receiver", err)
	}
}

func TestDeliverWithoutJobIDIsPermanent(t *testing.T) {
	t.Parallel()
	srv, got := newReceiver(t, func(w http.ResponseWriter, _ *http.Request) {})
	job := deliveryJob(1, 7)
	job.Task = asynq.NewTask("shipment.book", []byte(deliveryPayload))
	if _, err := Deliver(HTTPDelivery{URL: srv.URL})(t.Context(), job); !IsPermanent(err) {
		t.Fatalf("deliver = %v; want a permanent error", err)
	}
	if len(got) != 0 {
		t.Fatal("a job without an id was delivered")
	}
}

func TestDeliverRefusesConfigurationMistakes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		d     HTTPDelivery
		never string // must not show in the panic
	}{
		{name: "no URL", d: HTTPDelivery{}},
		{name: "relative URL", d: HTTPDelivery{URL: "/hooks"}},
		{name: "not http", d: HTTPDelivery{URL: "ftp://ship.internal/hooks"}},
		{name: "no host, password hidden", d: HTTPDelivery{URL: "https://user:hunter2@/hooks"}, never: "hunter2"},
		{name: "empty secret", d: HTTPDelivery{URL: "https://ship.internal/hooks", Secrets: [][]byte{vectorSecret, {}}}},
		{name: "header value with a newline", d: HTTPDelivery{URL: "https://ship.internal/hooks",
			Headers: map[string]string{"X-Api-Key": staticKey + "\r\nX-Injected: 1"}}, never: staticKey},
		{name: "header name with a space", d: HTTPDelivery{URL: "https://ship.internal/hooks",
			Headers: map[string]string{"X Api Key": "v"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			defer func() {
				r := recover()
				if r == nil {
					t.Fatal("Deliver accepted the configuration")
				}
				if msg := fmt.Sprint(r); tt.never != "" && strings.Contains(msg, tt.never) {
					t.Fatalf("panic %q shows %q", msg, tt.never)
				}
			}()
			Deliver(tt.d)
		})
	}
}

// stallingReceiver starts a receiver that never answers. arrived is
// closed when a request has arrived, cancelled when the receiver has seen
// its request cancelled.
func stallingReceiver(t *testing.T) (srv *httptest.Server, arrived, cancelled <-chan struct{}) {
	t.Helper()
	var arrivedOnce, cancelledOnce sync.Once
	a, c, stop := make(chan struct{}), make(chan struct{}), make(chan struct{})
	srv = httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		// The server notices a client going away only once the body has
		// been read to its end.
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			return
		}
		arrivedOnce.Do(func() { close(a) })
		select {
		case <-r.Context().Done():
			cancelledOnce.Do(func() { close(c) })
		case <-stop: // the test has failed: let Close return
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(stop) }) // before Close
	return srv, a, c
}

// waitClosed waits for ch to be closed; the long deadline only stops a
// broken test and says nothing about speed.
func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(60 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

func ExampleDeliver() {
	// The receiver: the user's service, which answers with a reference.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Println(r.Header.Get("Idemgate-Task"), r.Header.Get("Idemgate-Tenant"), r.Header.Get("Idempotency-Key"))
		io.WriteString(w, `{"result_ref":"shp_1"}`)
	}))
	defer srv.Close()

	// The secret is the base64 part of a "whsec_" secret, decoded.
	secret, err := base64.StdEncoding.DecodeString("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		panic(err)
	}
	deliver := Deliver(HTTPDelivery{URL: srv.URL + "/hooks/shipments", Secrets: [][]byte{secret}})
	// Handle calls it with each attempt; here, one attempt by hand.
	ref, err := deliver(context.Background(), Job[json.RawMessage]{
		Key: "shipment:o-1", Tenant: "acme", Resource: "order:o-1", Token: 7, Attempt: 1,
		Payload: json.RawMessage(`{"order_id":"o-1"}`),
		Task: asynq.NewTaskWithHeaders("shipment.book", []byte(`{"order_id":"o-1"}`),
			map[string]string{job.HeaderID: "job_1"}),
	})
	fmt.Println(ref, err)
	// Output:
	// shipment.book acme shipment:o-1
	// shp_1 <nil>
}
