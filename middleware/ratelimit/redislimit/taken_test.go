package redislimit_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/middleware/ratelimit"
	"github.com/idemgate/idemgate/middleware/ratelimit/redislimit"
)

// TakeN takes n tokens all or none, as ratelimit.Memory does: a take
// beyond what is left takes nothing, so the tokens stay for smaller ones.
func TestTakeN(t *testing.T) {
	forEachBackend(t, func(t *testing.T, client func(testing.TB) redis.UniversalClient) {
		for name, st := range map[string]ratelimit.Taker{
			"redis":  newStore(t, client(t), redislimit.Config{Tokens: 10, Interval: time.Hour, Prefix: testkit.Prefix()}),
			"memory": newMemory(t),
		} {
			ctx, key := t.Context(), "acme"
			if _, left, _, ok, err := st.TakeN(ctx, key, 7); err != nil || !ok || left != 3 {
				t.Fatalf("%s: take 7 of 10: left %d, ok %v, %v", name, left, ok, err)
			}
			if _, left, reset, ok, err := st.TakeN(ctx, key, 4); err != nil || ok || left != 3 || reset == 0 {
				t.Fatalf("%s: take 4 of 3: left %d, ok %v, reset %d, %v; want refused, nothing taken", name, left, ok, reset, err)
			}
			if _, left, _, ok, err := st.TakeN(ctx, key, 3); err != nil || !ok || left != 0 {
				t.Fatalf("%s: take the last 3: left %d, ok %v, %v", name, left, ok, err)
			}
		}
	})
}

func newMemory(t *testing.T) *ratelimit.Memory {
	m, err := ratelimit.NewMemory(ratelimit.MemoryConfig{Tokens: 10, Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close(t.Context()) })
	return m
}
