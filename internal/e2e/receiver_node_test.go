package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/job"
)

// receiverNodeDir is the TypeScript example receiver, from this package's
// directory.
var receiverNodeDir = filepath.Join("..", "..", "examples", "receiver-node")

// buildReceiverNode installs the receiver's packages and compiles it when
// either is missing (a fresh checkout where `make node` has not run).
func buildReceiverNode(t *testing.T) {
	t.Helper()
	need := []string{
		filepath.Join("node_modules", "pg", "package.json"),
		filepath.Join("node_modules", "standardwebhooks", "package.json"),
		filepath.Join("dist", "server.js"),
	}
	missing := false
	for _, p := range need {
		if _, err := os.Stat(filepath.Join(receiverNodeDir, p)); err != nil {
			missing = true
		}
	}
	if !missing {
		return
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Fatalf("the receiver is not built and npm is not on PATH (make node builds it): %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, args := range [][]string{
		{"ci", "--no-audit", "--no-fund", "--loglevel=error"},
		{"run", "build"},
	} {
		cmd := exec.CommandContext(ctx, npm, args...)
		cmd.Dir = receiverNodeDir
		cmd.WaitDelay = 10 * time.Second
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("npm %s in %s: %v\n%s", strings.Join(args, " "), receiverNodeDir, err, out)
		}
	}
}

// startReceiverNode runs `node dist/server.js` on a port of its own, its
// tables in schema, and returns its base URL. It is stopped with SIGTERM
// when the test ends.
func startReceiverNode(t *testing.T, nodeBin, dbURL, schema string) string {
	t.Helper()
	cmd := exec.Command(nodeBin, "dist/server.js")
	cmd.Dir = receiverNodeDir
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "PORT", "DATABASE_URL", "WEBHOOK_SECRET", "PGSCHEMA":
		default:
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "PORT=0", "DATABASE_URL="+dbURL, "WEBHOOK_SECRET="+webhookSecret, "PGSCHEMA="+schema)
	out, errOut := &testkit.SyncBuffer{}, &testkit.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, errOut
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatalf("start node: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	exited := false
	t.Cleanup(func() {
		if !exited {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
		}
		if t.Failed() {
			t.Logf("receiver-node stdout:\n%s\nreceiver-node stderr:\n%s", tail(out.String(), 4000), tail(errOut.String(), 4000))
		}
	})
	listening := regexp.MustCompile(`receiver-node listening on (http://127\.0\.0\.1:[0-9]+)`)
	var base string
	testkit.Eventually(t, "receiver-node listening", time.Minute, func() bool {
		select {
		case err := <-done:
			exited = true
			t.Fatalf("receiver-node exited before listening: %v", err)
		default:
		}
		if m := listening.FindStringSubmatch(out.String()); m != nil {
			base = m[1]
		}
		return base != ""
	})
	return base
}

// receiverEffects is the receiver's GET /effects.
type receiverEffects struct {
	Count int            `json:"count"`
	Keys  map[string]int `json:"keys"`
}

func getEffects(t *testing.T, base string) receiverEffects {
	t.Helper()
	res, err := client.Get(base + "/effects")
	if err != nil {
		t.Fatalf("GET /effects: %v", err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	var e receiverEffects
	if res.StatusCode != http.StatusOK || json.Unmarshal(b, &e) != nil {
		t.Fatalf("GET /effects: %d %s", res.StatusCode, b)
	}
	return e
}

// TestTypeScriptReceiverEndToEnd delivers declared jobs through a real
// gateway and worker to the TypeScript example receiver, which verifies the
// signatures with the standardwebhooks package and applies each effect once
// per (tenant, Idempotency-Key) in PostgreSQL.
func TestTypeScriptReceiverEndToEnd(t *testing.T) {
	nodeBin, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not on PATH: skipping the TypeScript receiver end-to-end test (make node installs Node.js and builds the receiver)")
	}
	dbURL, redisURL := testkit.Postgres(t, exampleTables()), testkit.RedisURL(t)
	baseURL := testkit.PostgresURL(t)
	buildReceiverNode(t)

	pool := testkit.PoolAt(t, dbURL)

	// The receiver's tables live in a schema of their own, dropped after
	// the receiver has stopped (cleanups run last registered first).
	schema := "rn_" + randomID()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, baseURL)
		if err != nil {
			t.Logf("drop schema %s: %v", schema, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE"); err != nil {
			t.Logf("drop schema %s: %v", schema, err)
		}
	})
	node := startReceiverNode(t, nodeBin, baseURL, schema)

	cfg := deliverConfig(t, dbURL, redisURL, node+"/hooks/shipments", "tsr"+randomID())
	g := startGateway(t, cfg)
	startWorker(t, cfg)

	type order struct{ tenant, orderID, id string }
	run := randomID()
	var jobs []order
	for i := range 5 {
		jobs = append(jobs, order{tenant: "acme", orderID: fmt.Sprintf("o-%s-%d", run, i)})
	}
	// The same order from another tenant: another business, another effect.
	jobs = append(jobs, order{tenant: "globex", orderID: jobs[0].orderID})
	for i := range jobs {
		jobs[i].id = job.ID(jobs[i].tenant, "shipments", "k-"+jobs[i].orderID)
	}

	// Each acme order three times at once: every answer is the job (202)
	// or "still in flight" (409), every 202 names the same job, and at
	// least one answer is a 202.
	var wg sync.WaitGroup
	var mu sync.Mutex
	accepted := map[string]int{}
	for i, j := range jobs {
		times := 3
		if j.tenant == "globex" {
			times = 1
		}
		body := fmt.Sprintf(`{"order_id": %q, "quantity": %d}`, j.orderID, i+1)
		for range times {
			wg.Go(func() {
				r, err := sendErr(g.public, req{path: "/v1/shipments", key: "k-" + j.orderID, apiKey: j.tenant + "-key", body: body})
				switch {
				case err != nil:
					t.Errorf("%s %s: %v", j.tenant, j.orderID, err)
				case r.status == http.StatusAccepted:
					var d jobDoc
					if json.Unmarshal(r.body, &d) != nil || d.ID != j.id {
						t.Errorf("%s %s: 202 with %s, want job %s", j.tenant, j.orderID, r.body, j.id)
					}
					mu.Lock()
					accepted[j.id]++
					mu.Unlock()
				case r.status != http.StatusConflict:
					t.Errorf("%s %s: %d %s", j.tenant, j.orderID, r.status, r.body)
				}
			})
		}
	}
	wg.Wait()
	for _, j := range jobs {
		if accepted[j.id] == 0 {
			t.Errorf("%s %s: no submission was answered 202", j.tenant, j.orderID)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	// Every job succeeds, with the receiver's result_ref.
	docs := map[string]jobDoc{}
	testkit.Eventually(t, "every job succeeded", 3*time.Minute, func() bool {
		for _, j := range jobs {
			if _, ok := docs[j.id]; ok {
				continue
			}
			d := decodeJob(t, getJob(t, g.public, j.id, j.tenant+"-key"))
			switch d.Status {
			case "succeeded":
				docs[j.id] = d
			case "failed":
				t.Fatalf("%s %s: job failed: %+v", j.tenant, j.orderID, d)
			}
		}
		if len(docs) < len(jobs) {
			time.Sleep(200 * time.Millisecond)
			return false
		}
		return true
	})
	refs := map[string]bool{}
	for _, j := range jobs {
		d := docs[j.id]
		if d.ResultRef == nil {
			t.Errorf("%s %s: no result_ref, want the receiver's shp_node_…", j.tenant, j.orderID)
			continue
		}
		if !strings.HasPrefix(*d.ResultRef, "shp_node_") {
			t.Errorf("%s %s: result_ref %q, want the receiver's shp_node_…", j.tenant, j.orderID, *d.ResultRef)
		}
		if refs[*d.ResultRef] {
			t.Errorf("%s %s: result_ref %s names another job's effect too", j.tenant, j.orderID, *d.ResultRef)
		}
		refs[*d.ResultRef] = true
	}

	// Exactly one effect per (tenant, business key).
	e := getEffects(t, node)
	want := map[string]int{}
	for _, j := range jobs {
		want[j.tenant+"/shipment:"+j.orderID] = 1
	}
	if e.Count != len(want) || len(e.Keys) != len(want) {
		t.Errorf("receiver effects %+v, want %d keys applied once each", e, len(want))
	}
	for k := range want {
		if e.Keys[k] != 1 {
			t.Errorf("receiver applied %s %d times, want once", k, e.Keys[k])
		}
	}

	// The jobs table and the receiver agree: as many succeeded jobs as
	// applied keys, and each job's result_ref is the one the receiver
	// recorded for its (tenant, business key).
	if n := count(t, pool, `SELECT count(*) FROM jobs WHERE status = 'succeeded'`); n != len(e.Keys) {
		t.Errorf("%d succeeded jobs, the receiver applied %d keys", n, len(e.Keys))
	}
	rows, err := pool.Query(context.Background(),
		`SELECT j.id, d.result_ref FROM jobs j JOIN `+schema+`.node_receiver_deliveries d
		   ON d.tenant = j.tenant AND d.idempotency_key = j.business_key`)
	if err != nil {
		t.Fatal(err)
	}
	recorded := map[string]string{}
	for rows.Next() {
		var id, ref string
		if err := rows.Scan(&id, &ref); err != nil {
			t.Fatal(err)
		}
		recorded[id] = ref
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		ref := ""
		if d := docs[j.id]; d.ResultRef != nil {
			ref = *d.ResultRef
		}
		if ref == "" || recorded[j.id] != ref {
			t.Errorf("%s %s: job result_ref %q, the receiver recorded %q", j.tenant, j.orderID, ref, recorded[j.id])
		}
	}
}
