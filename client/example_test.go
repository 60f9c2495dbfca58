package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	"github.com/idemgate/idemgate/client"
)

// payments plays an idemgate gateway in front of a payment service: the
// first attempt of each key finds the service busy (503, key released),
// the next one runs it once, and every later request with the key gets
// the stored answer, or 422 when its body differs.
func payments() (*httptest.Server, *int) {
	var mu sync.Mutex
	charges := 0
	tries := map[string]int{}
	stored := map[string]string{} // key → body of the request that ran
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		key := r.Header.Get("Idempotency-Key")
		mu.Lock()
		defer mu.Unlock()
		if first, ok := stored[key]; ok {
			if first != string(body) {
				w.Header().Set("Content-Type", "application/problem+json")
				w.WriteHeader(http.StatusUnprocessableEntity)
				fmt.Fprintf(w, `{"type":"https://idemgate.dev/problems/idempotency-key-reused","title":"Idempotency-Key reused",
					"status":422,"detail":"this key was used for a different request",
					"instance":"urn:uuid:01a2384e-26cb-7f2a-9944-c9c3269e0d37","request_id":"01a2384e-26cb-7f2a-9944-c9c3269e0d37",
					"retryable":false,"idempotency_key":%q}`, strings.Trim(key, `"`))
				return
			}
			w.Header().Set("Idempotent-Replayed", "true")
			w.WriteHeader(http.StatusCreated)
			fmt.Fprint(w, `{"id":"pay_1"}`)
			return
		}
		if tries[key]++; tries[key] == 1 {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		charges++
		stored[key] = string(body)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"id":"pay_1"}`)
	}))
	return srv, &charges
}

// A producer charges an order. The first attempt meets a 503 and is
// retried with the same key and body; a later call with the same business
// key is answered from the gateway's store, and the charge happens once.
func Example() {
	srv, charges := payments()
	defer srv.Close()
	c := client.New(srv.URL, client.WithAPIKey("acme-key"),
		client.WithRetry(client.Retry{MinBackoff: 10 * time.Millisecond}))
	ctx := context.Background()

	for range 2 {
		resp, err := c.Do(ctx, "POST", "/v1/payments", map[string]any{"order_id": "o-42", "amount_cents": 100},
			client.WithKey("order-o-42-charge"))
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(resp.Status, "attempts:", resp.Attempts, "replayed:", resp.Replayed, string(resp.Body))
	}
	fmt.Println("charges:", *charges)
	// Output:
	// 201 attempts: 2 replayed: false {"id":"pay_1"}
	// 201 attempts: 1 replayed: true {"id":"pay_1"}
	// charges: 1
}

// The same key with another body is refused at once: retrying cannot help.
func ExampleIsKeyReused() {
	srv, _ := payments()
	defer srv.Close()
	c := client.New(srv.URL, client.WithRetry(client.Retry{MinBackoff: 10 * time.Millisecond}))
	ctx := context.Background()

	_, _ = c.Do(ctx, "POST", "/v1/payments", map[string]int{"amount_cents": 100}, client.WithKey("k-1"))
	resp, err := c.Do(ctx, "POST", "/v1/payments", map[string]int{"amount_cents": 999}, client.WithKey("k-1"))
	fmt.Println(client.IsKeyReused(err), "attempts:", resp.Attempts)
	var p *client.ProblemError
	if errors.As(err, &p) {
		fmt.Println(p.Status, p.Slug(), "retryable:", p.Retryable, "key:", p.IdempotencyKey)
	}
	fmt.Println(err)
	// Output:
	// true attempts: 1
	// 422 idempotency-key-reused retryable: false key: k-1
	// idemgate: 422 idempotency-key-reused: this key was used for a different request
}

// A job is submitted to an enqueue route and waited for.
func ExampleClient_SubmitJob() {
	var mu sync.Mutex
	polls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		status, ref := "queued", "null"
		if r.Method == http.MethodGet {
			if polls++; polls > 1 {
				status, ref = "succeeded", `"r-1"`
			} else {
				status = "processing"
			}
		}
		w.Header().Set("Content-Type", "application/json")
		if r.Method == http.MethodPost {
			w.Header().Set("Location", "/v1/jobs/job_1")
			w.WriteHeader(http.StatusAccepted)
		}
		fmt.Fprintf(w, `{"id":"job_1","task":"shipment.book","status":%q,"attempts":1,"result_ref":%s,"error":null,
			"created_at":"2026-12-03T08:00:00Z","updated_at":"2026-12-03T08:00:01Z"}`, status, ref)
	}))
	defer srv.Close()
	c := client.New(srv.URL, client.WithAPIKey("acme-key"),
		client.WithRetry(client.Retry{MinBackoff: 10 * time.Millisecond}))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	job, err := c.SubmitJob(ctx, "/v1/shipments", map[string]any{"order_id": "o-1", "quantity": 2},
		client.WithKey("shipment-o-1"))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(job.Id, job.Status)
	job, err = c.WaitJob(ctx, job.Id)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(job.Status, *job.ResultRef)
	// Output:
	// job_1 queued
	// succeeded r-1
}
