// Package telemetry makes every idempotency and lock decision visible:
// OpenTelemetry traces that follow one request from the gateway through
// the queue to the worker and its database writes, and the Prometheus
// series the worker framework reports.
//
// Tracing is off unless OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set; the W3C trace context is
// propagated either way, so a caller's trace passes through the gateway to
// the upstream. Trace context crosses the queue inside the task's headers:
// the producer injects it and the worker's middleware starts the task's
// span under it, so database and partner spans, which only start under a
// parent, join the request's trace.
//
//	shutdown, err := telemetry.Setup(ctx, "idemgate", getenv)
//	defer shutdown(context.Background())
//
//	logger := slog.New(telemetry.LogHandler(slog.NewJSONHandler(w, nil))) // trace_id on each line
//	handler = telemetry.HTTPHandler(handler)
//	transport = telemetry.HTTPTransport(transport)
//	err = telemetry.InstrumentRedis(rdb)      // no commands or keys in spans
//	poolConfig.ConnConfig.Tracer = telemetry.PgxTracer()
//	enqueuer.Headers = telemetry.InjectTask
//	mux.Use(telemetry.TaskTracing(telemetry.WithFailure(workers.IsFailure)))
//
//	deps.Observer = telemetry.NewWorkerMetrics(registry)
//	registry.MustRegister(telemetry.NewQueueCollector(inspector, queues, logger))
//
// Metric names are a public interface: deploy/grafana and deploy/prometheus
// query them, and MetricNames lists every one.
package telemetry
