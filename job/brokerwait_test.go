package job_test

import (
	"errors"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/job"
)

// TestBrokerWait: with a replica attached, Submit returns once the
// replica holds the task; with the replica stopped, the job is accepted
// all the same (its record is the truth) but Submit says the task is
// deferred instead of returning as if a failover could not lose it.
func TestBrokerWait(t *testing.T) {
	primary, replica := testkit.RedisReplicated(t)
	pool := testkit.Pool(t)
	client := asynq.NewClient(asynq.RedisClientOpt{Addr: primary.Addr()})
	t.Cleanup(func() { _ = client.Close() })
	rdb := redis.NewClient(&redis.Options{Addr: primary.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	e := job.NewSubmitter(pool, client)
	// A healthy replica acknowledges at once (WAIT asks it to), but on a
	// loaded machine "at once" can take a few hundred milliseconds; the
	// stopped replica below costs the whole timeout, once.
	e.Broker = &job.BrokerWait{Client: rdb, Replicas: 1, Timeout: 3 * time.Second}
	v := env{e: e, queue: "test" + testkit.Prefix()[5:17]}
	ctx := t.Context()
	run := testkit.Prefix() // keys of this run's own: the database is shared
	body := `{"order_id":"o-1","amount_cents":1200,"currency":"EUR"}`
	onReplica := func(j job.Row) bool {
		// asynq keeps a task in the hash asynq:{queue}:t:<id>.
		n, err := replica.Client.Exists(ctx, "asynq:{"+j.Queue+"}:t:"+j.ID).Result()
		if err != nil {
			t.Fatal(err)
		}
		return n == 1
	}

	j, err := e.Submit(ctx, v.req(run+"in-sync", body))
	if err != nil {
		t.Fatalf("Submit, replica attached: %v", err)
	}
	if !onReplica(j) {
		t.Fatalf("Submit returned before the replica held the task")
	}

	resume := replica.Stop(t)
	j, err = e.Submit(ctx, v.req(run+"behind", body))
	if !errors.Is(err, job.ErrTaskDeferred) {
		t.Fatalf("Submit, replica stopped: %v, want ErrTaskDeferred", err)
	}
	if j.ID != job.ID("acme", "invoices", run+"behind") || j.Status != job.StatusQueued {
		t.Fatalf("Submit, replica stopped: job %+v, want it recorded and queued", j)
	}
	if _, err := e.Get(ctx, "acme", j.ID); err != nil {
		t.Fatalf("the accepted job is not readable: %v", err)
	}
	resume()
	testkit.WaitInSync(t, primary, replica)
	if _, err := e.Submit(ctx, v.req(run+"behind", body)); err != nil {
		t.Fatalf("the same request again, replica back: %v", err)
	}
	if !onReplica(j) {
		t.Fatalf("the replica lacks the task after the wait succeeded")
	}
}
