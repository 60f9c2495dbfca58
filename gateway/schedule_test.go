package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/middleware/idempotency/pgstore"
	"github.com/idemgate/idemgate/problem"
)

// scheduleJobs records what each submit asked and answers with a job
// whose not_before follows the request's schedule.
type scheduleJobs struct {
	mu   sync.Mutex
	reqs []job.Request
}

func (s *scheduleJobs) submitted() []job.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]job.Request(nil), s.reqs...)
}

func (s *scheduleJobs) fake() fakeJobs {
	return fakeJobs{submit: func(_ context.Context, req job.Request) (job.Row, error) {
		s.mu.Lock()
		s.reqs = append(s.reqs, req)
		s.mu.Unlock()
		nb := time.Now().Add(600 * time.Hour)
		return job.Row{ID: job.ID(req.Tenant, req.Route, req.Key), Task: req.Spec.Task, Status: job.StatusScheduled, NotBefore: &nb}, nil
	}}
}

// The schedule headers of an enqueue route: each unreadable one is 400
// invalid-schedule, one beyond max_delay is 422 schedule-out-of-range
// naming the maximum, and neither reaches the job store.
func TestScheduleHeaders(t *testing.T) {
	t.Parallel()
	jobs := &scheduleJobs{}
	g := newTestGateway(t, testOptions(jobs.fake()))
	in := func(d time.Duration) string { return time.Now().Add(d).Format(time.RFC3339) }
	body := `{"order_id":"o-1","amount_cents":100,"currency":"EUR"}`
	for _, tc := range []struct {
		name   string
		header []string
		status int
		slug   string
		want   job.Schedule // for 202
	}{
		{"a delay", []string{HeaderDelay, "30"}, 202, "", job.ScheduleAfter(30 * time.Second)},
		{"a zero delay", []string{HeaderDelay, "0"}, 202, "", job.ScheduleAfter(0)},
		{"no schedule", nil, 202, "", job.Schedule{}},
		{"a time with an offset", []string{HeaderNotBefore, "2026-01-02T08:00:00+01:00"}, 202, "",
			job.ScheduleAt(time.Date(2026, 1, 2, 7, 0, 0, 0, time.UTC))},
		{"the max delay", []string{HeaderDelay, "2592000"}, 202, "", job.ScheduleAfter(720 * time.Hour)},
		{"both", []string{HeaderDelay, "30", HeaderNotBefore, in(time.Hour)}, 400, "invalid-schedule", job.Schedule{}},
		{"a delay twice", []string{HeaderDelay, "30", HeaderDelay, "30"}, 400, "invalid-schedule", job.Schedule{}},
		{"a negative delay", []string{HeaderDelay, "-5"}, 400, "invalid-schedule", job.Schedule{}},
		{"a fractional delay", []string{HeaderDelay, "1.5"}, 400, "invalid-schedule", job.Schedule{}},
		{"a signed delay", []string{HeaderDelay, "+5"}, 400, "invalid-schedule", job.Schedule{}},
		{"a delay with a unit", []string{HeaderDelay, "30s"}, 400, "invalid-schedule", job.Schedule{}},
		{"an empty delay", []string{HeaderDelay, ""}, 400, "invalid-schedule", job.Schedule{}},
		{"a time without an offset", []string{HeaderNotBefore, "2026-01-02T08:00:00"}, 400, "invalid-schedule", job.Schedule{}},
		{"a date alone", []string{HeaderNotBefore, "2026-01-02"}, 400, "invalid-schedule", job.Schedule{}},
		{"an HTTP date", []string{HeaderNotBefore, "Fri, 02 Jan 2026 08:00:00 GMT"}, 400, "invalid-schedule", job.Schedule{}},
		{"a delay beyond max_delay", []string{HeaderDelay, "2592001"}, 422, "schedule-out-of-range", job.Schedule{}},
		{"a delay beyond any number", []string{HeaderDelay, "99999999999999999999999"}, 422, "schedule-out-of-range", job.Schedule{}},
		{"a time beyond max_delay", []string{HeaderNotBefore, in(721 * time.Hour)}, 422, "schedule-out-of-range", job.Schedule{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(jobs.submitted())
			key := "sched-" + strings.ReplaceAll(tc.name, " ", "-")
			header := append([]string{"Authorization", "Bearer " + testAPIKey, "Idempotency-Key", key, "Content-Type", "application/json"}, tc.header...)
			resp, got := serve(t, g.Handler(), http.MethodPost, "/v1/invoices", body, header...)
			if resp.StatusCode != tc.status {
				t.Fatalf("%d %s, want %d", resp.StatusCode, got, tc.status)
			}
			reqs := jobs.submitted()
			if tc.status != http.StatusAccepted {
				var p struct{ Type, Detail string }
				_ = json.Unmarshal([]byte(got), &p)
				if p.Type != problem.DefaultBase+tc.slug || resp.Header.Get("Content-Type") != "application/problem+json" {
					t.Errorf("problem %s, want type %s", got, tc.slug)
				}
				if tc.slug == "schedule-out-of-range" && !strings.Contains(p.Detail, "720h0m0s") {
					t.Errorf("detail %q does not name the maximum", p.Detail)
				}
				if len(reqs) != before {
					t.Errorf("a refused schedule reached the job store")
				}
				return
			}
			if len(reqs) != before+1 || reqs[len(reqs)-1].Schedule != tc.want {
				t.Fatalf("submitted %+v, want schedule %+v", reqs[len(reqs)-1].Schedule, tc.want)
			}
		})
	}
}

// The schedule is part of the request: a retry with the same header
// replays the job; the same key with another schedule, or without one, is
// another request (422 key reused). The stored 202 of a job scheduled
// weeks ahead is kept for the retention after its not_before.
func TestScheduleIsPartOfTheRequest(t *testing.T) {
	t.Parallel()
	jobs := &scheduleJobs{}
	opts := testOptions(jobs.fake())
	g := newTestGateway(t, opts)
	body := `{"order_id":"o-1","amount_cents":100,"currency":"EUR"}`
	post := func(header ...string) (*http.Response, string) {
		return serve(t, g.Handler(), http.MethodPost, "/v1/invoices", body, append([]string{
			"Authorization", "Bearer " + testAPIKey, "Idempotency-Key", "k-sched", "Content-Type", "application/json"}, header...)...)
	}
	if resp, got := post(HeaderDelay, "60"); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("first: %d %s", resp.StatusCode, got)
	}
	if resp, got := post(HeaderDelay, " 60 "); resp.StatusCode != http.StatusAccepted || resp.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("a retry with the same schedule: %d replayed=%q %s, want the stored 202", resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), got)
	}
	for _, other := range [][]string{{HeaderDelay, "61"}, {HeaderNotBefore, time.Now().Add(time.Minute).Format(time.RFC3339)}, nil} {
		resp, got := post(other...)
		if resp.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(got, "idempotency-key-reused") {
			t.Errorf("the same key with schedule %q: %d %s, want 422 idempotency-key-reused", other, resp.StatusCode, got)
		}
	}
	if n := len(jobs.submitted()); n != 1 {
		t.Errorf("%d submits, want 1", n)
	}
	rec, err := opts.Store.Get(t.Context(), idempotency.Scope{Tenant: "acme", Route: "invoices", Key: "k-sched"})
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Now().Add(600*time.Hour + idempotency.DefaultRetention - time.Minute); rec.ExpiresAt.Before(want) {
		t.Errorf("the stored 202 expires at %s, want at least not_before + retention (%s)", rec.ExpiresAt, want)
	}
}

// Finding 7: a not_before before 1970 or after 9999 (in UTC) is refused
// with 400 invalid-schedule; 1600 used to be taken, and its answer kept
// until 2184 (time.UnixNano wraps before 1678). A time past in range runs
// the job at once and keeps its answer the usual retention.
func TestNotBeforeOutOfRange(t *testing.T) {
	pool := testkit.Pool(t)
	client, _, queue := testkit.Queue(t, "notbefore")
	opts := testOptions(job.NewSubmitter(pool, client))
	opts.Routes[0].Enqueue = &EnqueueOptions{Spec: invoiceSpec, Queue: queue}
	store := pgstore.New(pool)
	t.Cleanup(store.Close)
	opts.Store = store
	g := newTestGateway(t, opts)
	run := testkit.Prefix()
	body := `{"order_id":"o-1","amount_cents":100,"currency":"EUR"}`
	for _, tc := range []struct {
		name, at string
		status   int
	}{
		{"1600", "1600-01-01T00:00:00Z", http.StatusBadRequest},
		{"1969", "1969-12-31T23:59:59Z", http.StatusBadRequest},
		{"0000", "0000-01-01T00:00:00Z", http.StatusBadRequest},
		{"10000 by its offset", "9999-12-31T23:30:00-01:00", http.StatusBadRequest},
		{"10000", "10000-01-01T00:00:00Z", http.StatusBadRequest},
		{"1970", "1970-01-01T00:00:00Z", http.StatusAccepted},
		{"last year", time.Now().AddDate(-1, 0, 0).Format(time.RFC3339), http.StatusAccepted},
	} {
		key := run + strings.ReplaceAll(tc.name, " ", "-")
		resp, got := serve(t, g.Handler(), http.MethodPost, "/v1/invoices", body, "Authorization", "Bearer "+testAPIKey,
			"Idempotency-Key", key, "Content-Type", "application/json", HeaderNotBefore, tc.at)
		if resp.StatusCode != tc.status {
			t.Fatalf("%s: %d %s, want %d", tc.name, resp.StatusCode, got, tc.status)
		}
		if tc.status == http.StatusBadRequest {
			if p := decodeBody(t, got); p.Type != problem.DefaultBase+"invalid-schedule" || !strings.Contains(p.Detail, "1970 to 9999") {
				t.Errorf("%s: %s %q, want invalid-schedule naming the years", tc.name, p.Type, p.Detail)
			}
			if _, err := opts.Jobs.Get(t.Context(), "acme", job.ID("acme", "invoices", key)); !errors.Is(err, job.ErrNotFound) {
				t.Errorf("%s: a job was recorded (%v)", tc.name, err)
			}
			continue
		}
		rec, err := store.Get(t.Context(), idempotency.Scope{Tenant: "acme", Route: "invoices", Key: key})
		if err != nil {
			t.Fatal(err)
		}
		if limit := time.Now().Add(idempotency.DefaultRetention + time.Hour); rec.ExpiresAt.After(limit) {
			t.Errorf("%s: the stored answer expires %s, want within the retention from now (%s)", tc.name, rec.ExpiresAt, limit)
		}
	}
}
