package testkit

import (
	"testing"

	"github.com/hibiken/asynq"
)

// Queue is an asynq client and inspector on TEST_REDIS_URL and a queue
// name of the test's own (name followed by random hex), deleted with its
// tasks when the test ends.
func Queue(t testing.TB, name string) (*asynq.Client, *asynq.Inspector, string) {
	t.Helper()
	opt, err := asynq.ParseRedisURI(RedisURL(t))
	if err != nil {
		t.Fatal(err)
	}
	client := asynq.NewClient(opt)
	t.Cleanup(func() { _ = client.Close() })
	inspector := asynq.NewInspector(opt)
	queue := name + randomHex(6)
	t.Cleanup(func() {
		_ = inspector.DeleteQueue(queue, true)
		_ = inspector.Close()
	})
	return client, inspector, queue
}
