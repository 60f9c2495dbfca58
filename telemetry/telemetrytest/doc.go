// Package telemetrytest records the spans a test produces, in memory:
//
//	tp, spans := telemetrytest.NewProvider(t)
//	h := telemetry.HTTPHandler(next, telemetry.WithTracerProvider(tp))
//	// … serve a request, then:
//	got := telemetrytest.Ended(t, tp, spans)
package telemetrytest
