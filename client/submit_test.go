package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/idemgate/idemgate/openapi"
)

func jobReply(status int, jobStatus string, resultRef string) reply {
	ref := "null"
	if resultRef != "" {
		ref = fmt.Sprintf("%q", resultRef)
	}
	return reply{status: status, header: map[string]string{"Content-Type": "application/json", "Location": "/v1/jobs/job_1"},
		body: fmt.Sprintf(`{"id":"job_1","task":"shipment.book","status":%q,"attempts":1,"result_ref":%s,"error":null,
			"created_at":"2026-12-03T08:00:00Z","updated_at":"2026-12-03T08:00:01Z"}`, jobStatus, ref)}
}

func TestSubmitJob(t *testing.T) {
	t.Parallel()
	g := newGateway(t, reply{status: 503}, jobReply(202, "queued", ""))
	c := testClient(g, newClock(), WithAPIKey("acme-key"))
	j, err := c.SubmitJob(t.Context(), "/v1/shipments", map[string]any{"order_id": "o-1", "quantity": 2}, WithKey("shipment-o-1"))
	if err != nil {
		t.Fatal(err)
	}
	if j.Id != "job_1" || j.Task != "shipment.book" || j.Status != openapi.JobStatusQueued || !j.CreatedAt.Equal(time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)) {
		t.Errorf("job %+v", j)
	}
	for _, r := range g.requests() {
		if r.method != "POST" || r.path != "/v1/shipments" || r.key != "shipment-o-1" || string(r.body) != `{"order_id":"o-1","quantity":2}` {
			t.Errorf("request %s %s key %q body %s", r.method, r.path, r.key, r.body)
		}
	}
}

func TestSubmitJobRefusals(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		answer reply
		check  func(error) bool
	}{
		{"invalid payload", problemReply(422, "invalid-payload", "", nil), IsInvalidPayload},
		{"not an enqueue route", created(`{"id":"pay_1"}`), func(err error) bool { var p *ProblemError; return err != nil && !errors.As(err, &p) }},
		{"not a job document", reply{status: 202, body: `{"queued":true}`}, func(err error) bool { return err != nil }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := newGateway(t, tc.answer)
			j, err := testClient(g, newClock()).SubmitJob(t.Context(), "/v1/shipments", map[string]int{"quantity": 0})
			if !tc.check(err) || j.Id != "" {
				t.Errorf("SubmitJob: %+v, %v", j, err)
			}
		})
	}
}

func TestWaitJob(t *testing.T) {
	t.Parallel()
	t.Run("polls until succeeded", func(t *testing.T) {
		t.Parallel()
		g := newGateway(t, jobReply(200, "queued", ""), reply{status: 502}, jobReply(200, "processing", ""), jobReply(200, "retrying", ""), jobReply(200, "succeeded", "r-1"))
		clk := newClock()
		j, err := testClient(g, clk).WaitJob(t.Context(), "job_1")
		if err != nil || j.Status != openapi.JobStatusSucceeded || j.ResultRef == nil || *j.ResultRef != "r-1" {
			t.Fatalf("WaitJob: %+v, %v", j, err)
		}
		for _, r := range g.requests() {
			if r.method != "GET" || r.path != "/v1/jobs/job_1?wait=30" || r.key != "" || r.header.Get("If-None-Match") != "" {
				t.Errorf("poll %s %s key %q", r.method, r.path, r.key)
			}
		}
		// A gateway that ignores wait (no ETag, answered at once): three
		// polls saw an unfinished job; the 502 was retried within a poll.
		w := clk.recorded()
		if len(w) != 4 || w[0] != DefaultMinBackoff || w[2] != 2*DefaultMinBackoff || w[3] != 4*DefaultMinBackoff {
			t.Errorf("waits %v, want poll gaps doubling from MinBackoff and one retry backoff", w)
		}
	})
	t.Run("a failed job is no error", func(t *testing.T) {
		t.Parallel()
		g := newGateway(t, jobReply(200, "failed", ""))
		j, err := testClient(g, newClock()).WaitJob(t.Context(), "job_1")
		if err != nil || j.Status != openapi.JobStatusFailed {
			t.Fatalf("WaitJob: %+v, %v; want the failed document and a nil error", j, err)
		}
	})
	t.Run("unknown job", func(t *testing.T) {
		t.Parallel()
		g := newGateway(t, problemReply(404, "not-found", "no such job", nil))
		_, err := testClient(g, newClock()).WaitJob(t.Context(), "job_x")
		var p *ProblemError
		if !errors.As(err, &p) || p.Status != 404 || len(g.requests()) != 1 {
			t.Fatalf("WaitJob: %v, want the 404 at once", err)
		}
	})
	t.Run("context ends the wait", func(t *testing.T) {
		t.Parallel()
		g := newGateway(t, jobReply(200, "processing", ""))
		clk := newClock()
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		clk.onSleep = func(n int) {
			if n == 3 {
				cancel()
			}
		}
		j, err := testClient(g, clk).WaitJob(ctx, "job_1")
		if !errors.Is(err, context.Canceled) || j.Status != openapi.JobStatusProcessing || len(g.requests()) != 3 {
			t.Fatalf("WaitJob: %+v, %v after %d polls; want the last document and context.Canceled after 3", j, err, len(g.requests()))
		}
	})
}

// etagged is reply with an ETag.
func etagged(r reply, etag string) reply {
	h := map[string]string{"ETag": etag}
	for k, v := range r.header {
		h[k] = v
	}
	r.header = h
	return r
}

func TestWaitJobWaitsOnTheGateway(t *testing.T) {
	t.Parallel()
	t.Run("a gateway that holds", func(t *testing.T) {
		t.Parallel()
		processing := etagged(jobReply(200, "processing", ""), `"e1"`)
		processing.held = 30 * time.Second // the first GET: until the end of its wait
		unchanged := reply{status: 304, header: map[string]string{"ETag": `"e1"`}, held: 30 * time.Second}
		done := etagged(jobReply(200, "succeeded", "r-1"), `"e2"`)
		done.held = 2 * time.Second
		g := newGateway(t, processing, unchanged, done)
		clk := newClock()
		g.clk = clk
		j, err := testClient(g, clk).WaitJob(t.Context(), "job_1")
		if err != nil || j.Status != openapi.JobStatusSucceeded {
			t.Fatalf("WaitJob: %+v, %v", j, err)
		}
		reqs := g.requests()
		if len(reqs) != 3 {
			t.Fatalf("%d GETs, want 3", len(reqs))
		}
		for i, want := range []string{"", `"e1"`, `"e1"`} {
			if reqs[i].path != "/v1/jobs/job_1?wait=30" || reqs[i].header.Get("If-None-Match") != want {
				t.Errorf("GET %d: %s If-None-Match %q, want ?wait=30 and %q", i+1, reqs[i].path, reqs[i].header.Get("If-None-Match"), want)
			}
		}
		if w := clk.recorded(); len(w) != 0 {
			t.Errorf("WaitJob slept %v between held GETs, want no sleep", w)
		}
	})
	t.Run("a gateway that answers at once polls with backoff", func(t *testing.T) {
		t.Parallel()
		g := newGateway(t, etagged(jobReply(200, "processing", ""), `"e1"`),
			reply{status: 304, header: map[string]string{"ETag": `"e1"`}},
			reply{status: 304, header: map[string]string{"ETag": `"e1"`}},
			etagged(jobReply(200, "succeeded", "r-1"), `"e2"`))
		clk := newClock()
		j, err := testClient(g, clk).WaitJob(t.Context(), "job_1")
		if err != nil || j.Status != openapi.JobStatusSucceeded {
			t.Fatalf("WaitJob: %+v, %v", j, err)
		}
		w := clk.recorded()
		if len(w) != 3 || w[0] != DefaultMinBackoff || w[1] != 2*DefaultMinBackoff || w[2] != 4*DefaultMinBackoff {
			t.Errorf("waits %v, want gaps doubling from MinBackoff, never back to back", w)
		}
	})
	t.Run("the http.Client's timeout shortens the wait", func(t *testing.T) {
		t.Parallel()
		g := newGateway(t, jobReply(200, "succeeded", "r-1"))
		c := testClient(g, newClock(), WithHTTPClient(&http.Client{Transport: g.srv.Client().Transport, Timeout: 12 * time.Second}))
		if _, err := c.WaitJob(t.Context(), "job_1"); err != nil {
			t.Fatal(err)
		}
		if p := g.requests()[0].path; p != "/v1/jobs/job_1?wait=7" {
			t.Errorf("GET %s, want ?wait=7 (12s timeout less 5s)", p)
		}
	})
}
