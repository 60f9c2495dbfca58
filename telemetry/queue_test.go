package telemetry_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/telemetry"
)

func TestQueueCollectorReportsDepthAndDLQ(t *testing.T) {
	t.Parallel()
	opt, err := asynq.ParseRedisURI(testkit.RedisURL(t))
	if err != nil {
		t.Fatal(err)
	}
	id := testkit.Prefix()[5:17]
	queue, unseen := "telemetry-q-"+id, "telemetry-unseen-"+id
	client := asynq.NewClient(opt)
	defer client.Close()
	inspector := asynq.NewInspector(opt)
	defer inspector.Close()
	defer func() { _ = inspector.DeleteQueue(queue, true) }()

	for _, id := range []string{"a", "b", "c"} {
		if _, err := client.EnqueueContext(t.Context(), asynq.NewTask("x.y", nil), asynq.Queue(queue), asynq.TaskID(id)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := client.EnqueueContext(t.Context(), asynq.NewTask("x.y", nil), asynq.Queue(queue), asynq.TaskID("later"), asynq.ProcessIn(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := inspector.ArchiveTask(queue, "b"); err != nil {
		t.Fatal(err)
	}

	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(telemetry.NewQueueCollector(inspector, []string{queue, unseen, queue}, nil))
	got := series(t, reg)
	want := map[string]float64{
		"idemgate_dlq_tasks{queue=" + queue + "}":                    1,
		"idemgate_queue_depth{queue=" + queue + ",state=pending}":    2,
		"idemgate_queue_depth{queue=" + queue + ",state=active}":     0,
		"idemgate_queue_depth{queue=" + queue + ",state=scheduled}":  1,
		"idemgate_queue_depth{queue=" + queue + ",state=retry}":      0,
		"idemgate_queue_depth{queue=" + queue + ",state=archived}":   1,
		"idemgate_dlq_tasks{queue=" + unseen + "}":                   0,
		"idemgate_queue_depth{queue=" + unseen + ",state=pending}":   0,
		"idemgate_queue_depth{queue=" + unseen + ",state=active}":    0,
		"idemgate_queue_depth{queue=" + unseen + ",state=scheduled}": 0,
		"idemgate_queue_depth{queue=" + unseen + ",state=retry}":     0,
		"idemgate_queue_depth{queue=" + unseen + ",state=archived}":  0,
	}
	for name, w := range want {
		if g, ok := got[name]; !ok || g != w {
			t.Errorf("%s = %v (present %v), want %v", name, g, ok, w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d series, want %d: %v", len(got), len(want), got)
	}

	// Without a list, every queue asynq knows is reported.
	all := prometheus.NewPedanticRegistry()
	all.MustRegister(telemetry.NewQueueCollector(inspector, nil, nil))
	if got := series(t, all)["idemgate_dlq_tasks{queue="+queue+"}"]; got != 1 {
		t.Errorf("discovered queue's DLQ = %v, want 1", got)
	}
}

func TestQueueCollectorLogsWhenRedisIsDown(t *testing.T) {
	t.Parallel()
	// Nothing listens on port 1 of the loopback.
	inspector := asynq.NewInspector(asynq.RedisClientOpt{Addr: "127.0.0.1:1", DialTimeout: 200 * time.Millisecond})
	defer inspector.Close()
	var logs testkit.SyncBuffer
	reg := prometheus.NewRegistry()
	reg.MustRegister(telemetry.NewQueueCollector(inspector, []string{"default"}, slog.New(slog.NewJSONHandler(&logs, nil))))
	families, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather failed with Redis down: %v; the rest of /metrics must still be served", err)
	}
	if len(families) != 0 {
		t.Errorf("%d families reported with Redis down, want none", len(families))
	}
	if !strings.Contains(logs.String(), "queue metrics not collected") {
		t.Errorf("nothing logged: %q", logs.String())
	}
}
