package job_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/job"
)

// Each shard's slot lies in its share of the slot space, and a tenant
// always gets the same shard.
func TestShardQueueSlots(t *testing.T) {
	t.Parallel()
	for _, n := range []int{2, 3, 5, 16} {
		for i, q := range job.ShardQueues("default", n) {
			if lo, hi := i*16384/n, (i+1)*16384/n; job.QueueSlot(q) < lo || job.QueueSlot(q) >= hi {
				t.Errorf("%d shards: %s is in slot %d, not in [%d, %d)", n, q, job.QueueSlot(q), lo, hi)
			}
		}
	}
	if q := job.ShardQueue("default", "acme", 1); q != "default" {
		t.Errorf("one shard: %s", q)
	}
	if a, b := job.ShardQueue("default", "acme", 3), job.ShardQueue("default", "acme", 3); a != b || !slices.Contains(job.ShardQueues("default", 3), a) {
		t.Errorf("acme's shard: %s then %s", a, b)
	}
}

// With broker.shards 3 on the three-node test cluster, the tasks of many
// tenants' jobs are spread over every node, not held by one.
func TestShardsSpreadTasksOverClusterNodes(t *testing.T) {
	cluster := testkit.RedisCluster(t)
	client := asynq.NewClientFromRedisClient(cluster)
	inspector := asynq.NewInspectorFromRedisClient(cluster)
	queue := "shard" + strings.ReplaceAll(strings.TrimSuffix(testkit.Prefix(), ":"), ":", "")
	t.Cleanup(func() {
		for _, q := range job.ShardQueues(queue, 3) {
			_ = inspector.DeleteQueue(q, true)
		}
	})
	sub := job.NewSubmitter(testkit.Pool(t), client)
	sub.Shards = 3
	spec, err := job.NewSpec("shard.work", []byte(`{"type":"object","required":["id"],"properties":{"id":{"type":"string"}}}`), "{id}", "")
	if err != nil {
		t.Fatal(err)
	}
	spec.Queue = queue
	for i := range 60 {
		tenant := fmt.Sprintf("tenant-%d", i)
		r, err := sub.Submit(t.Context(), job.Request{Tenant: tenant, Route: "r", Key: "k", Spec: spec, Body: []byte(`{"id":"x"}`)})
		if err != nil {
			t.Fatal(err)
		}
		if r.Queue != job.ShardQueue(queue, tenant, 3) {
			t.Fatalf("job of %s recorded on queue %s, want its shard %s", tenant, r.Queue, job.ShardQueue(queue, tenant, 3))
		}
	}
	for _, q := range job.ShardQueues(queue, 3) {
		// Redis agrees with QueueSlot.
		if slot, err := cluster.ClusterKeySlot(t.Context(), "asynq:{"+q+"}:pending").Result(); err != nil || int(slot) != job.QueueSlot(q) {
			t.Errorf("CLUSTER KEYSLOT of %s: %d %v; QueueSlot says %d", q, slot, err, job.QueueSlot(q))
		}
	}
	held := map[string]int{}
	var mu sync.Mutex // ForEachMaster asks the nodes at once
	err = cluster.ForEachMaster(t.Context(), func(ctx context.Context, node *redis.Client) error {
		for _, q := range job.ShardQueues(queue, 3) {
			n, err := node.LLen(ctx, "asynq:{"+q+"}:pending").Result()
			if err != nil && !strings.Contains(err.Error(), "MOVED") {
				return err
			}
			mu.Lock()
			held[node.Options().Addr] += int(n)
			mu.Unlock()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, n := range held {
		total += n
	}
	if len(held) != 3 || total != 60 {
		t.Fatalf("tasks by node: %v; want 60 over 3 nodes", held)
	}
	for addr, n := range held {
		if n == 0 {
			t.Errorf("node %s holds no task: %v", addr, held)
		}
	}
	t.Logf("tasks by node: %v", held)
}

func TestBaseQueue(t *testing.T) {
	t.Parallel()
	for _, q := range job.ShardQueues("payments.s1", 4) {
		if got := job.BaseQueue(q); got != "payments.s1" {
			t.Errorf("BaseQueue(%q) = %q", q, got)
		}
	}
	for _, q := range []string{"payments", "a.s", "a.s1", "a.sx-1", "a.s1-"} {
		if got := job.BaseQueue(q); got != q {
			t.Errorf("BaseQueue(%q) = %q, want itself", q, got)
		}
	}
}
