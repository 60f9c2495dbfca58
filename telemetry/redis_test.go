package telemetry_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/telemetry"
	"github.com/idemgate/idemgate/telemetry/telemetrytest"
)

// leaks reports every place in spans where secret appears: name,
// attributes, events, status.
func leaks(spans tracetest.SpanStubs, secret string) []string {
	var out []string
	for _, s := range spans {
		if strings.Contains(s.Name, secret) || strings.Contains(s.Status.Description, secret) {
			out = append(out, s.Name)
		}
		for _, kv := range s.Attributes {
			if strings.Contains(kv.Value.String(), secret) {
				out = append(out, s.Name+" "+string(kv.Key))
			}
		}
		for _, ev := range s.Events {
			for _, kv := range ev.Attributes {
				if strings.Contains(kv.Value.String(), secret) {
					out = append(out, s.Name+" event "+string(kv.Key))
				}
			}
		}
	}
	return out
}

func TestRedisSpansCarryNoKeysOrValues(t *testing.T) {
	t.Parallel()
	rdb := testkit.Redis(t)
	tp, exp := telemetrytest.NewProvider(t)
	if err := telemetry.InstrumentRedis(rdb, telemetry.WithTracerProvider(tp)); err != nil {
		t.Fatal(err)
	}
	prefix := testkit.Prefix()
	key, owner := prefix+"lock:{order:42}", "owner-"+prefix
	t.Cleanup(func() { rdb.Del(context.Background(), key) })

	// Outside a trace (a lease renewal, a readiness check): no span.
	if err := rdb.Set(t.Context(), key, owner, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if spans := telemetrytest.Ended(t, tp, exp); len(spans) != 0 {
		t.Fatalf("%d spans without a parent, want none", len(spans))
	}

	ctx, parent := tp.Tracer("test").Start(t.Context(), "job")
	if err := rdb.Get(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	pipe := rdb.TxPipeline()
	pipe.PExpire(ctx, key, time.Minute)
	pipe.Get(ctx, key)
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	// A lease renewal: the key and the owner token are the script's arguments.
	const renew = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0`
	if n, err := rdb.Eval(ctx, renew, []string{key}, owner, 60000).Int(); err != nil || n != 1 {
		t.Fatalf("renew: %d, %v", n, err)
	}
	parent.End()

	spans := telemetrytest.Ended(t, tp, exp)
	for _, name := range []string{"get", "eval"} {
		if s := one(t, spans, name); s.Parent.SpanID() != parent.SpanContext().SpanID() {
			t.Errorf("redis span %q not under the job span", name)
		}
	}
	one(t, spans, "redis.pipeline multi pexpire get exec")
	for _, secret := range []string{key, owner} {
		if where := leaks(spans, secret); len(where) > 0 {
			t.Errorf("%q appears in %q", secret, where)
		}
	}
}
