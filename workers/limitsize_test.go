package workers

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/workers/flowlimit"
)

// TestLongLimitValuesStaySmallInRedis: a flow limit keyed on a payload
// field holds, in Redis, a short form of each value, whatever its size: 20
// jobs whose account is 100 KB each leave a few KiB under the limit's
// keys. The values used to be kept whole, in each budget's key names and
// in the index of recent values, for 24 hours: 2 MiB and more.
func TestLongLimitValuesStaySmallInRedis(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) }))
	t.Cleanup(srv.Close)
	// One start an hour per account: each value's rate state stays.
	use := limitUse(t, job.FlowLimit{Name: "ship-accounts", Concurrency: 1, Rate: 1, Period: time.Hour}, "acct:{account}")
	mux, err := NewHandlers().Mux(e.deps(nil, 5*time.Second), []*job.Spec{partnerSpec(t, srv.URL, use)}, HTTPDelivery{})
	if err != nil {
		t.Fatal(err)
	}
	const jobs = 20
	for i := range jobs {
		account := fmt.Sprintf("%03d", i) + strings.Repeat("a", 100_000)
		payload := fmt.Sprintf(`{"order_id": "o-%d", "account": %q}`, i, account)
		task := asynq.NewTaskWithHeaders(kind, []byte(payload),
			map[string]string{job.HeaderTenant: "acme", job.HeaderID: fmt.Sprintf("job-long-%d", i)})
		if err := mux.ProcessTask(t.Context(), task); err != nil {
			t.Fatalf("job %d: %v", i, err)
		}
	}

	var keys []string
	iter := e.rdb.Scan(t.Context(), 0, e.prefix+"idemgate:limit:*", 100).Iterator()
	for iter.Next(t.Context()) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	var bytes int64
	for _, k := range keys {
		n, err := e.rdb.MemoryUsage(t.Context(), k).Result()
		if err != nil {
			t.Fatal(err)
		}
		bytes += n
	}
	// 20 rate states and the index: each well under a KiB.
	if len(keys) != jobs+1 || bytes >= 32<<10 {
		t.Errorf("%d keys under the limit, %d bytes in all; want %d, well under 32 KiB", len(keys), bytes, jobs+1)
	}
	usage, err := flowlimit.New(e.rdb, flowlimit.Options{Prefix: e.prefix}).Busiest(t.Context(), "ship-accounts", jobs)
	if err != nil || len(usage) != jobs {
		t.Fatalf("Busiest = %d values, %v; want %d", len(usage), err, jobs)
	}
	for _, u := range usage {
		if len(u.Value) > 100 || !strings.HasPrefix(u.Value, "acct:0") || u.Backlog <= 0 {
			t.Errorf("value %.120q (backlog %s), want the start of the value and a digest, with its start taken", u.Value, u.Backlog)
			break
		}
	}
}
