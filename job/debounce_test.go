package job_test

import (
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/job"
)

// debounceSpec is the invoice job, debounced per order, with its body's
// amount the revision.
func debounceSpec(mode job.DebounceMode) *job.Spec {
	spec := invoiceSpec("invoice.debounced")
	key, err := job.ParseTemplate("{tenant}:{order_id}")
	if err != nil {
		panic(err)
	}
	spec.Debounce = &job.Debounce{Key: key, Delay: time.Minute, MaxDelay: time.Hour, Mode: mode}
	return spec
}

func (v env) debounced(key string, amount int, spec *job.Spec) job.Request {
	body := fmt.Sprintf(`{"order_id":"o-1","amount_cents":%d,"currency":"EUR"}`, amount)
	return job.Request{Tenant: "acme", Route: "invoices", Key: key, Spec: spec, Queue: v.queue, Body: []byte(body)}
}

// Concurrent submits under distinct keys fold into one job, counted once
// each, and the queue holds the task of its latest version with its body.
func TestDebounceFoldsConcurrentSubmits(t *testing.T) {
	v := setup(t)
	v.e.Inspector = v.inspector
	spec := debounceSpec(job.DebounceTrailing)
	const n = 20
	ids := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			r, err := v.e.Submit(t.Context(), v.debounced("k-"+strconv.Itoa(i), 100+i, spec))
			if err != nil {
				t.Error(err)
			}
			ids[i] = r.ID
		})
	}
	wg.Wait()
	for _, id := range ids[1:] {
		if id != ids[0] {
			t.Fatalf("jobs %v; want one", ids)
		}
	}
	r, err := v.e.Get(t.Context(), "acme", ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if r.Debounce == nil || r.Debounce.Coalesced != n || r.Debounce.Key != "acme:o-1" || r.Status != job.StatusScheduled {
		t.Fatalf("record: %s %+v; want scheduled, %d coalesced under acme:o-1", r.Status, r.Debounce, n)
	}
	info, err := v.inspector.GetTaskInfo(v.queue, job.TaskID(r))
	if err != nil {
		t.Fatalf("the latest version's task %s: %v", job.TaskID(r), err)
	}
	if string(info.Payload) != string(r.Payload) || info.NextProcessAt.Before(*r.NotBefore) {
		t.Errorf("task: %s due %s; want the record's body %s, due %s", info.Payload, info.NextProcessAt, r.Payload, r.NotBefore)
	}
	if got := info.Headers[job.HeaderDebounce]; got != strconv.Itoa(n) {
		t.Errorf("task header %s = %q; want %d", job.HeaderDebounce, got, n)
	}
	// A retry under a key already folded in counts it again but makes no
	// second job; a retry under the key that created the job changes
	// nothing.
	again, err := v.e.Submit(t.Context(), v.debounced("k-0", 999, spec))
	if err != nil || again.ID != r.ID {
		t.Fatalf("retry: %s %v", again.ID, err)
	}
}

// Leading keeps the first body; the time still moves, never past until.
func TestDebounceLeadingKeepsTheFirstBody(t *testing.T) {
	v := setup(t)
	spec := debounceSpec(job.DebounceLeading)
	spec.Debounce.Delay, spec.Debounce.MaxDelay = time.Hour, 90*time.Minute
	first, err := v.e.Submit(t.Context(), v.debounced("a", 100, spec))
	if err != nil {
		t.Fatal(err)
	}
	var last job.Row
	for i := 1; i <= 3; i++ {
		if last, err = v.e.Submit(t.Context(), v.debounced("b"+strconv.Itoa(i), 100+i, spec)); err != nil {
			t.Fatal(err)
		}
	}
	if last.ID != first.ID || string(last.Payload) != string(first.Payload) || last.Debounce.Coalesced != 4 {
		t.Fatalf("leading: %s %s %+v; want the first job and body, 4 coalesced", last.ID, last.Payload, last.Debounce)
	}
	if last.NotBefore.After(last.Debounce.Until) || !last.NotBefore.After(*first.NotBefore) {
		t.Errorf("not_before %s (first %s, until %s); want it moved, never past until", last.NotBefore, first.NotBefore, last.Debounce.Until)
	}
}

// A request may not schedule a debounced job.
func TestDebounceRefusesARequestSchedule(t *testing.T) {
	spec := debounceSpec(job.DebounceTrailing)
	if err := spec.CheckSchedule(job.ScheduleAfter(time.Second), time.Now()); err == nil {
		t.Error("CheckSchedule accepted Idemgate-Delay on a debounced job")
	}
}

func TestDebounceCheck(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		d    job.Debounce
		ok   bool
	}{
		{"the lowest bounds", job.Debounce{Delay: time.Second, MaxDelay: time.Second}, true},
		{"the highest delay", job.Debounce{Delay: job.MaxDebounceDelay, MaxDelay: job.MaxDebounceDelay, Mode: job.DebounceLeading}, true},
		{"below a second", job.Debounce{Delay: 999 * time.Millisecond, MaxDelay: time.Minute}, false},
		{"above seven days", job.Debounce{Delay: job.MaxDebounceDelay + time.Second, MaxDelay: 8 * 24 * time.Hour}, false},
		{"no max_delay", job.Debounce{Delay: time.Second}, false},
		{"max_delay below delay", job.Debounce{Delay: time.Minute, MaxDelay: time.Second}, false},
		{"an unknown mode", job.Debounce{Delay: time.Second, MaxDelay: time.Second, Mode: "both"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if err := tc.d.Check(); (err == nil) != tc.ok {
				t.Errorf("Check(%+v) = %v; want ok %v", tc.d, err, tc.ok)
			}
		})
	}
}
