package e2e

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/idemgate/idemgate/internal/testkit"
)

// TestRetentionInWorker: `idemgate worker` deletes the final jobs past
// jobs_retention with their attempt ledger, and the executions past
// executions_retention, and counts them on its /metrics; a job within the
// retention keeps its record and its ledger.
func TestRetentionInWorker(t *testing.T) {
	dbURL, redisURL := testkit.Postgres(t, exampleTables()), testkit.RedisURL(t)
	pool := testkit.PoolAt(t, dbURL)
	srv := httptest.NewServer(newScriptedReceiver(t))
	t.Cleanup(srv.Close)
	base := deliverConfig(t, dbURL, redisURL, srv.URL+"/hooks/shipments", "ret"+randomID())
	text, err := os.ReadFile(base)
	if err != nil {
		t.Fatal(err)
	}
	cfg := writeFile(t, "retention.yaml", string(text)+"jobs_retention: 1h\nexecutions_retention: 2h\njanitor: {interval: 100ms, batch: 1}\n")
	g := startGateway(t, cfg)
	p := runInProcess("worker", "--config", cfg)
	t.Cleanup(func() { _ = p.stop() })
	testkit.Eventually(t, "worker listening", 30*time.Second, func() bool { return addrs(p.out.String())["worker-admin"] != "" })

	var ids []string
	for i := range 3 {
		ids = append(ids, submitShipment(t, g, fmt.Sprintf("ret-%d", i), fmt.Sprintf(`{"order_id": "ok-ret-%d", "quantity": 1}`, i)))
	}
	for _, id := range ids {
		testkit.Eventually(t, "job "+id+" succeeded", time.Minute, func() bool { return decodeJob(t, getJob(t, g.public, id, "acme-key")).Status == "succeeded" })
	}
	count := func(sql string, args ...any) int {
		t.Helper()
		var n int
		if err := pool.QueryRow(t.Context(), sql, args...).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count(`SELECT count(*) FROM job_attempts WHERE job_id = ANY($1)`, ids); n != 3 {
		t.Fatalf("%d ledger rows before the janitor, want 3", n)
	}
	// The audit trail is kept as long as jobs are: an action of 90
	// minutes ago goes, one of now stays.
	if _, err := pool.Exec(t.Context(), `INSERT INTO admin_actions (action_id, at, actor, action, tenant, job_id)
VALUES (1, now() - interval '90 minutes', 'alice', 'requeue', 'acme', $1), (2, now(), 'bob', 'requeue', 'acme', $1)`, ids[2]); err != nil {
		t.Fatal(err)
	}
	// Two jobs ended 90 minutes ago; their executions too, one of them
	// three hours ago.
	if _, err := pool.Exec(t.Context(), `UPDATE jobs SET finished_at = now() - interval '90 minutes' WHERE id = ANY($1)`, ids[:2]); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(t.Context(), `UPDATE job_executions SET finished_at = now() - interval '3 hours' WHERE key = 'shipment:ok-ret-0'`); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the janitor deleted the two old jobs", time.Minute, func() bool {
		return count(`SELECT count(*) FROM jobs WHERE id = ANY($1)`, ids) == 1
	})
	testkit.Eventually(t, "the janitor deleted the old execution", time.Minute, func() bool {
		return count(`SELECT count(*) FROM job_executions WHERE key = 'shipment:ok-ret-0'`) == 0
	})
	if n := count(`SELECT count(*) FROM job_attempts WHERE job_id = ANY($1)`, ids); n != 1 {
		t.Errorf("%d ledger rows left, want 1: the kept job's", n)
	}
	if n := count(`SELECT count(*) FROM job_executions WHERE key IN ('shipment:ok-ret-1', 'shipment:ok-ret-2')`); n != 2 {
		t.Errorf("%d executions within their retention left, want 2", n)
	}
	testkit.Eventually(t, "the janitor deleted the old action", time.Minute, func() bool {
		return count(`SELECT count(*) FROM admin_actions WHERE actor = 'alice'`) == 0
	})
	if n := count(`SELECT count(*) FROM admin_actions WHERE actor = 'bob'`); n != 1 {
		t.Errorf("%d actions within the retention left, want 1", n)
	}
	if j := decodeJob(t, getJob(t, g.public, ids[2], "acme-key")); j.Status != "succeeded" {
		t.Errorf("the job within the retention: %+v", j)
	}

	req, _ := http.NewRequest(http.MethodGet, addrs(p.out.String())["worker-admin"]+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	metrics, _ := io.ReadAll(resp.Body)
	for _, want := range []string{`idemgate_retention_deleted_total{table="jobs"} 2`, `idemgate_retention_deleted_total{table="job_executions"} 1`,
		`idemgate_retention_deleted_total{table="admin_actions"} 1`} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestRetentionDeletesArchivedTask: when `idemgate worker` deletes a
// failed job past jobs_retention, its archived task goes too, so the
// payload does not outlive the job in Redis and no one can run it again
// from the queue's console.
func TestRetentionDeletesArchivedTask(t *testing.T) {
	dbURL := testkit.Postgres(t, exampleTables())
	pool := testkit.PoolAt(t, dbURL)
	_, inspector, queue := testkit.Queue(t, "retarch")
	srv := httptest.NewServer(newScriptedReceiver(t))
	t.Cleanup(srv.Close)
	base := deliverConfig(t, dbURL, testkit.RedisURL(t), srv.URL+"/hooks/shipments", queue)
	text, err := os.ReadFile(base)
	if err != nil {
		t.Fatal(err)
	}
	cfg := writeFile(t, "retention.yaml", string(text)+"jobs_retention: 1h\njanitor: {interval: 100ms, batch: 10}\n")
	g := startGateway(t, cfg)
	p := runInProcess("worker", "--config", cfg)
	t.Cleanup(func() { _ = p.stop() })

	// The receiver refuses order "bad-…" for good: the job fails and its
	// task is archived.
	id := submitShipment(t, g, "retarch-1", `{"order_id": "bad-retarch", "quantity": 1}`)
	testkit.Eventually(t, "job "+id+" failed", time.Minute, func() bool { return decodeJob(t, getJob(t, g.public, id, "acme-key")).Status == "failed" })
	testkit.Eventually(t, "its task archived", time.Minute, func() bool {
		info, err := inspector.GetTaskInfo(queue, id)
		return err == nil && info.State == asynq.TaskStateArchived
	})

	if _, err := pool.Exec(t.Context(), `UPDATE jobs SET finished_at = now() - interval '90 minutes' WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the janitor deleted the failed job", time.Minute, func() bool {
		var n int
		if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM jobs WHERE id = $1`, id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 0
	})
	testkit.Eventually(t, "its archived task deleted", time.Minute, func() bool {
		_, err := inspector.GetTaskInfo(queue, id)
		return errors.Is(err, asynq.ErrTaskNotFound)
	})
	archived, err := inspector.ListArchivedTasks(queue)
	if err != nil {
		t.Fatal(err)
	}
	if len(archived) != 0 {
		t.Errorf("%d archived tasks left on the queue, want none", len(archived))
	}
}
