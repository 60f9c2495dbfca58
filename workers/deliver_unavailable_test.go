package workers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/idemgate/idemgate/job"
)

// deliveryTask is the task of shipment order o, as the gateway enqueues it.
func deliveryTask(o string) *asynq.Task {
	payload := `{"order_id":"` + o + `"}`
	return asynq.NewTaskWithHeaders("shipment.book", []byte(payload), map[string]string{job.HeaderID: "job_" + o})
}

func shipmentKey(p json.RawMessage) string {
	var o order
	_ = json.Unmarshal(p, &o)
	return "shipment:" + o.OrderID
}

func shipmentResource(p json.RawMessage) string {
	var o order
	_ = json.Unmarshal(p, &o)
	return "order:" + o.OrderID
}

// Through the handler: a receiver that is down for more deliveries than
// the job has attempts, then answers, gets the job once and the job
// succeeds; one that answers 500 dead-letters it after MaxAttempts.
func TestDeliverUnavailableReceiverIsNotAnAttempt(t *testing.T) {
	t.Parallel()
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	tests := []struct {
		name string
		// downStatus is what the receiver answers while down; 0: the
		// connection is refused.
		downStatus int
		retryAfter string
	}{
		{name: "503", downStatus: http.StatusServiceUnavailable},
		{name: "503 with Retry-After", downStatus: http.StatusServiceUnavailable, retryAfter: "3"},
		{name: "429", downStatus: http.StatusTooManyRequests},
		{name: "connection refused"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			const down = 5
			var answered, succeeded atomic.Int64
			var lastAttempt atomic.Value
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				lastAttempt.Store(r.Header.Get("Idemgate-Attempt"))
				if answered.Add(1) <= down {
					if tt.retryAfter != "" {
						w.Header().Set("Retry-After", tt.retryAfter)
					}
					w.WriteHeader(tt.downStatus)
					return
				}
				succeeded.Add(1)
				io.WriteString(w, `{"result_ref":"shp_1"}`)
			}))
			t.Cleanup(srv.Close)
			d := HTTPDelivery{URL: srv.URL}
			if tt.downStatus == 0 {
				var dials atomic.Int64
				d.Client = &http.Client{Transport: &http.Transport{
					DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
						if dials.Add(1) <= down {
							return nil, refused
						}
						return (&net.Dialer{}).DialContext(ctx, network, addr)
					},
				}}
				answered.Store(down) // the receiver answers every request it gets
			}
			h := Handle(e.deps(nil, 20*time.Second), "shipment.book", shipmentKey, shipmentResource, Deliver(d), WithMaxAttempts(2))
			o := fmt.Sprintf("u%d", i)
			task := deliveryTask(o)

			for n := 1; n <= down; n++ {
				err := h.ProcessTask(t.Context(), task)
				if err == nil || errors.Is(err, asynq.SkipRetry) || !IsUnavailable(err) || !IsFailure(err) {
					t.Fatalf("delivery %d while the receiver is down: %v, want an unavailable receiver, retried", n, err)
				}
				if tt.retryAfter != "" {
					// As asynq sees it; a jitter of 0 shows the floor.
					b := Backoff{Rand: func(int64) int64 { return 0 }}
					if got := b.RetryDelay(n-1, err, task); got != 3*time.Second {
						t.Fatalf("delivery %d: RetryDelay = %s, want the Retry-After, 3s", n, got)
					}
				}
				if rec := e.record(t, "shipment:"+o); rec.Status != job.StatusProcessing || rec.Attempts != 0 {
					t.Fatalf("delivery %d: record = %+v, want processing with no attempt counted", n, rec)
				}
			}
			if err := h.ProcessTask(t.Context(), task); err != nil {
				t.Fatalf("delivery once the receiver is back: %v", err)
			}
			if rec := e.record(t, "shipment:"+o); rec.Status != job.StatusSucceeded || rec.Attempts != 1 || rec.ResultRef != "shp_1" {
				t.Fatalf("record = %+v, want succeeded after 1 attempt", rec)
			}
			if err := h.ProcessTask(t.Context(), task); err != nil {
				t.Fatalf("a later duplicate: %v", err)
			}
			if got := succeeded.Load(); got != 1 {
				t.Fatalf("the receiver accepted the job %d times, want 1", got)
			}
			if got := lastAttempt.Load(); got != "1" {
				t.Fatalf("Idemgate-Attempt of the delivery that succeeded = %v, want 1", got)
			}
		})
	}

	t.Run("500 dead-letters after MaxAttempts", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		var calls atomic.Int64
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			calls.Add(1)
			http.Error(w, "nil pointer dereference", http.StatusInternalServerError)
		}))
		t.Cleanup(srv.Close)
		h := Handle(e.deps(nil, 20*time.Second), "shipment.book", shipmentKey, shipmentResource, Deliver(HTTPDelivery{URL: srv.URL}), WithMaxAttempts(3))
		task := deliveryTask("f")
		for n := 1; n <= 3; n++ {
			err := h.ProcessTask(t.Context(), task)
			if IsUnavailable(err) {
				t.Fatalf("delivery %d: %v: a 500 is a receiver failing on the job, not an unavailable one", n, err)
			}
			if n < 3 {
				if err == nil || errors.Is(err, asynq.SkipRetry) {
					t.Fatalf("delivery %d: %v, want a retryable failure", n, err)
				}
				continue
			}
			if !errors.Is(err, asynq.SkipRetry) {
				t.Fatalf("delivery %d: %v, want SkipRetry (archive)", n, err)
			}
		}
		rec := e.record(t, "shipment:f")
		if rec.Status != job.StatusFailed || rec.Attempts != 3 || !strings.Contains(rec.LastError, "attempts exhausted (3 of 3)") ||
			!strings.Contains(rec.LastError, "answered 500") {
			t.Fatalf("record = %+v, want failed after 3 attempts with the receiver's answer", rec)
		}
		if got := calls.Load(); got != 3 {
			t.Fatalf("receiver called %d times, want 3", got)
		}
	})
}
