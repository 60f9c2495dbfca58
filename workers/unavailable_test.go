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
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/idemgate/idemgate/job"
)

// A dependency that stays down for more deliveries than the job has
// attempts delays the job and never fails it: each unavailable attempt is
// recorded and given back.
func TestUnavailableIsNotAnAttempt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	obs := newRecorder()
	var st statuses
	deps := e.deps(obs, 20*time.Second)
	deps.OnStatus = st.fn
	const down = 5
	var (
		calls    atomic.Int64
		attempts []int // Job.Attempt of each call
	)
	h := Handle(deps, kind, orderKey, orderResource, func(ctx context.Context, job Job[order]) (string, error) {
		attempts = append(attempts, job.Attempt)
		if calls.Add(1) <= down {
			return "", Unavailable(errors.New("partner answered 503"))
		}
		return idempotentEffect(ctx, e.pool, job, "A")
	}, WithMaxAttempts(2))
	task := newTask(t, "10")

	for i := 1; i <= down; i++ {
		err := h.ProcessTask(t.Context(), task)
		if err == nil || errors.Is(err, asynq.SkipRetry) || !IsUnavailable(err) || !IsFailure(err) {
			t.Fatalf("delivery %d while the partner is down: %v, want an unavailable error asynq retries with backoff", i, err)
		}
		rec := e.record(t, "effect:10")
		if rec.Status != job.StatusProcessing || rec.Attempts != 0 || rec.LastError != "unavailable: partner answered 503" {
			t.Fatalf("delivery %d: record = %+v, want processing, 0 attempts, the error recorded", i, rec)
		}
	}
	if err := h.ProcessTask(t.Context(), task); err != nil {
		t.Fatalf("delivery once the partner is back: %v", err)
	}
	rec := e.record(t, "effect:10")
	if rec.Status != job.StatusSucceeded || rec.Attempts != 1 || rec.LastError != "" {
		t.Fatalf("record = %+v, want succeeded after 1 real attempt", rec)
	}
	if got := e.effects(t, "effect:10"); len(got) != 1 {
		t.Fatalf("effects = %+v, want one", got)
	}
	if want := []int{1, 1, 1, 1, 1, 1}; !slices.Equal(attempts, want) {
		t.Fatalf("Job.Attempt of each call = %v, want %v", attempts, want)
	}
	for _, s := range st.list() {
		if strings.Contains(s, " failed ") {
			t.Fatalf("statuses = %q: the job was reported failed", st.list())
		}
	}
	if got, want := st.list()[1], "effect:10 retrying #0 "; got != want {
		t.Fatalf("status after the first unavailable attempt = %q, want %q", got, want)
	}
	if obs.count("attempt:unavailable") != down || obs.count("attempt:transient") != 0 ||
		obs.count("finished:failed") != 0 || obs.count("finished:succeeded") != 1 {
		t.Fatalf("observer = %v", obs.counts)
	}
}

// Unavailable attempts between real failures do not count, and do not
// reset the count either: the job dead-letters after MaxAttempts real
// failures.
func TestUnavailableBetweenFailuresStillDeadLetters(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	obs := newRecorder()
	// f: a real failure; u: the partner is unavailable.
	const script = "fuuuufuuuuf"
	var (
		calls    atomic.Int64
		attempts []int
	)
	h := Handle(e.deps(obs, 20*time.Second), kind, orderKey, orderResource, func(ctx context.Context, job Job[order]) (string, error) {
		attempts = append(attempts, job.Attempt)
		if script[calls.Add(1)-1] == 'u' {
			return "", Unavailable(errors.New("partner answered 503"))
		}
		return "", errors.New("partner answered 500")
	}, WithMaxAttempts(3))
	task := newTask(t, "11")

	failures := 0
	for i, c := range script {
		err := h.ProcessTask(t.Context(), task)
		if c == 'f' {
			failures++
		}
		rec := e.record(t, "effect:11")
		if i < len(script)-1 {
			if err == nil || errors.Is(err, asynq.SkipRetry) || !IsFailure(err) {
				t.Fatalf("delivery %d (%c): %v, want a retryable failure", i+1, c, err)
			}
			if rec.Status != job.StatusProcessing || rec.Attempts != failures {
				t.Fatalf("delivery %d (%c): record = %+v, want processing after %d real attempts", i+1, c, rec, failures)
			}
			continue
		}
		if !errors.Is(err, asynq.SkipRetry) {
			t.Fatalf("third real failure: %v, want SkipRetry (archive)", err)
		}
		if rec.Status != job.StatusFailed || rec.Attempts != 3 ||
			rec.LastError != "attempts exhausted (3 of 3): partner answered 500" {
			t.Fatalf("after the third real failure: record = %+v", rec)
		}
	}
	if want := []int{1, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3}; !slices.Equal(attempts, want) {
		t.Fatalf("Job.Attempt of each call = %v, want %v", attempts, want)
	}
	if obs.count("attempt:transient") != 3 || obs.count("attempt:unavailable") != 8 || obs.count("finished:failed") != 1 {
		t.Fatalf("observer = %v", obs.counts)
	}
}

// Permanent wins over Unavailable: the job fails at once.
func TestPermanentUnavailableFailsTheJob(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	h := Handle(e.deps(nil, 20*time.Second), kind, orderKey, orderResource, func(ctx context.Context, job Job[order]) (string, error) {
		return "", Permanent(Unavailable(errors.New("partner endpoint retired")))
	}, WithMaxAttempts(5))
	if err := h.ProcessTask(t.Context(), newTask(t, "12")); !errors.Is(err, asynq.SkipRetry) {
		t.Fatalf("ProcessTask = %v, want SkipRetry (archive)", err)
	}
	if rec := e.record(t, "effect:12"); rec.Status != job.StatusFailed || rec.Attempts != 1 {
		t.Fatalf("record = %+v, want failed after 1 attempt", rec)
	}
}

// HTTP delivery: a receiver that is down is an unavailable dependency.

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
					// As asynq sees it; a jitter of 0 shows the floor, and
					// a clock on a whole second leaves nothing to round up.
					b := Backoff{Rand: func(int64) int64 { return 0 }, Now: func() time.Time { return time.Unix(1_800_000_000, 0) }}
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
