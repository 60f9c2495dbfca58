package telemetry

import (
	"github.com/exaring/otelpgx"
	"github.com/jackc/pgx/v5"
)

// PgxTracer returns the tracer to set as pgx.ConnConfig.Tracer (for a
// pool, pgxpool.Config.ConnConfig.Tracer): a client span per query
// ("query INSERT"), statement preparation ("prepare INSERT"), batch, copy,
// connect and pool acquire, started only under an existing span. Spans
// carry the SQL text (our queries are constants) but never its arguments.
// The value also implements pgxpool.AcquireTracer; keep its dynamic type.
func PgxTracer(opts ...Option) pgx.QueryTracer {
	o := newOptions(opts)
	return otelpgx.NewTracer(
		otelpgx.WithTracerProvider(o.tp),
		// Without the prefix a statement's preparation and its execution
		// are two spans of the same name.
		otelpgx.WithQuerySpanNamePrefix(),
	)
}
