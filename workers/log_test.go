package workers

import (
	"encoding/json"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/testkit"
)

// logLines is a JSON log kept for a test to read back.
type logLines struct{ testkit.SyncBuffer }

func (l *logLines) logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// find returns the first line whose msg contains msg.
func (l *logLines) find(t *testing.T, msg string) map[string]any {
	t.Helper()
	log := l.String()
	for _, line := range strings.Split(strings.TrimSpace(log), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && strings.Contains(m["msg"].(string), msg) {
			return m
		}
	}
	t.Fatalf("no log line %q in:\n%s", msg, log)
	return nil
}

func wantFields(t *testing.T, line map[string]any, want map[string]any) {
	t.Helper()
	for k, v := range want {
		if got := line[k]; got != v {
			t.Errorf("log %q: %s = %v, want %v (line %v)", line["msg"], k, got, v, line)
		}
	}
}

// TestLogFields: a lock contention and a replayed delivery each log one
// line with the job's key, resource and task, the lock event, and for the
// replay the attempt and result that stood.
func TestLogFields(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var logs logLines
	deps := e.deps(newRecorder(), 20*time.Second)
	deps.Logger = logs.logger()
	var calls atomic.Int64
	h := Handle(deps, kind, orderKey, orderResource, plainEffect(e.pool, "A", &calls))
	task := newTask(t, "log-1")

	held := e.holdLock(t, "order:log-1")
	if err := h.ProcessTask(t.Context(), task); err == nil {
		t.Fatal("a delivery while the resource is locked succeeded")
	}
	wantFields(t, logs.find(t, "resource locked by another worker"), map[string]any{
		"level": "DEBUG", "task": kind, "job_key": "effect:log-1", "resource": "order:log-1", "lock_event": "busy",
	})
	if err := held.Release(t.Context()); err != nil {
		t.Fatal(err)
	}

	if err := h.ProcessTask(t.Context(), task); err != nil {
		t.Fatal(err)
	}
	if err := h.ProcessTask(t.Context(), task); err != nil { // the duplicate
		t.Fatal(err)
	}
	done := logs.find(t, "job succeeded")
	wantFields(t, done, map[string]any{"task": kind, "job_key": "effect:log-1", "resource": "order:log-1", "attempt": float64(1)})
	if tok, ok := done["fencing_token"].(float64); !ok || tok < 1 {
		t.Errorf("log %q: fencing_token = %v, want the attempt's token", done["msg"], done["fencing_token"])
	}
	replay := logs.find(t, "job already succeeded")
	wantFields(t, replay, map[string]any{
		"level": "INFO", "task": kind, "job_key": "effect:log-1", "resource": "order:log-1",
		"attempt": float64(1), "result_ref": done["result_ref"],
	})
	if calls.Load() != 1 {
		t.Fatalf("effect ran %d times", calls.Load())
	}
}
