package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/idemgate/idemgate/client"
	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/openapi"
)

// TestJobWaitEndToEnd drives GET /v1/jobs/{id}?wait= and the Go SDK's
// WaitJob through `idemgate serve` and `idemgate worker` while the
// receiver holds the delivery: the waits are held by the gateway (one GET
// each, not a poll loop) and answered as soon as the job has succeeded.
func TestJobWaitEndToEnd(t *testing.T) {
	dbURL, redisURL := testkit.Postgres(t, exampleTables()), testkit.RedisURL(t)
	arrived := make(chan struct{}, 1)
	release := make(chan struct{})
	var answered atomic.Int64 // when the receiver answered, in Unix nanoseconds
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case arrived <- struct{}{}:
		default:
		}
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Content-Type", "application/json")
		answered.Store(time.Now().UnixNano())
		_, _ = io.WriteString(w, `{"result_ref": "r-1"}`)
	}))
	t.Cleanup(rcv.Close)
	cfg := deliverConfig(t, dbURL, redisURL, rcv.URL+"/hooks/shipments", "wait"+randomID())
	g := startGateway(t, cfg)
	startWorker(t, cfg)
	log := newAttemptLog(t)
	c := log.client(g.public, sdk.Retry{})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	job, err := c.SubmitJob(ctx, "/v1/shipments", map[string]any{"order_id": "wait-" + randomID(), "quantity": 1})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-arrived:
	case <-ctx.Done():
		t.Fatal("the job was not delivered")
	}

	type answer struct {
		status int
		etag   string
		doc    openapi.Job
		at     time.Time
		err    error
	}
	raw := make(chan answer, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, g.public+"/v1/jobs/"+job.Id+"?wait=25", nil)
		req.Header.Set("Authorization", "Bearer acme-key")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			raw <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		a := answer{status: resp.StatusCode, etag: resp.Header.Get("ETag")}
		a.err = json.NewDecoder(resp.Body).Decode(&a.doc)
		a.at = time.Now()
		raw <- a
	}()
	waited := make(chan sdk.Job, 1)
	waitErr := make(chan error, 1)
	go func() {
		j, err := c.WaitJob(ctx, job.Id)
		waited <- j
		waitErr <- err
	}()

	// While the receiver holds the job, the SDK's GET is held too: a
	// poll loop would have sent several in this window.
	time.Sleep(2 * time.Second)
	gets := func() int {
		n := 0
		for _, a := range log.all() {
			if strings.HasPrefix(a.path, "/v1/jobs/") {
				n++
			}
		}
		return n
	}
	if n := gets(); n > 1 {
		t.Fatalf("WaitJob sent %d GETs in 2s while the job ran, want one held GET", n)
	}
	close(release)

	a := <-raw
	if a.err != nil || a.status != http.StatusOK || a.doc.Status != openapi.JobStatusSucceeded || a.etag == "" {
		t.Fatalf("GET ?wait=25: %d %q etag %q err %v, want 200 succeeded with an ETag", a.status, a.doc.Status, a.etag, a.err)
	}
	after := a.at.Sub(time.Unix(0, answered.Load()))
	t.Logf("the held GET answered %s after the receiver's answer (the worker's commit in between)", after)
	if after > 5*time.Second {
		t.Fatalf("the held GET answered %s after the job ended", after)
	}
	final, err := <-waited, <-waitErr
	if err != nil || final.Status != openapi.JobStatusSucceeded || final.ResultRef == nil || *final.ResultRef != "r-1" {
		t.Fatalf("WaitJob: %+v, %v", final, err)
	}
	if n := gets(); n > 3 {
		t.Errorf("WaitJob sent %d GETs for one job's run, want at most 3 (held, not polled)", n)
	}
}
