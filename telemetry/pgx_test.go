package telemetry_test

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/telemetry"
	"github.com/idemgate/idemgate/telemetry/telemetrytest"
)

func TestPgxSpansOnlyUnderAParentAndWithoutArguments(t *testing.T) {
	t.Parallel()
	cfg, err := pgxpool.ParseConfig(testkit.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	tp, exp := telemetrytest.NewProvider(t)
	cfg.ConnConfig.Tracer = telemetry.PgxTracer(telemetry.WithTracerProvider(tp))
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	secret := "owner-" + testkit.Prefix()

	var got string
	if err := pool.QueryRow(t.Context(), "SELECT $1::text", secret).Scan(&got); err != nil {
		t.Fatal(err)
	}
	if spans := telemetrytest.Ended(t, tp, exp); len(spans) != 0 {
		t.Fatalf("%d spans without a parent, want none", len(spans))
	}

	ctx, parent := tp.Tracer("test").Start(t.Context(), "job")
	if err := pool.QueryRow(ctx, "SELECT $1::text", secret).Scan(&got); err != nil {
		t.Fatal(err)
	}
	// A statement no connection has prepared yet: prepared, then run.
	const fresh = "SELECT length($1::text)"
	var n int
	if err := pool.QueryRow(ctx, fresh, secret).Scan(&n); err != nil {
		t.Fatal(err)
	}
	parent.End()
	spans := telemetrytest.Ended(t, tp, exp)
	for _, q := range telemetrytest.Named(spans, "query SELECT") {
		if q.Parent.SpanID() != parent.SpanContext().SpanID() {
			t.Error("query span not under the job span")
		}
	}
	if got := len(telemetrytest.Named(spans, "query SELECT")); got != 2 {
		t.Errorf("%d query spans, want 2", got)
	}
	prepared := false
	for _, p := range telemetrytest.Named(spans, "prepare SELECT") {
		prepared = prepared || attr(t, p, "db.query.text") == fresh
	}
	if !prepared {
		t.Errorf("no prepare span for %q", fresh)
	}
	if where := leaks(spans, secret); len(where) > 0 {
		t.Errorf("a query argument appears in %q", where)
	}
}
