// Package extension is what a program adds to the idemgate command line
// when it is built as its own binary, the way Caddy and the OpenTelemetry
// Collector are built with plugins: Go handlers for declared jobs, the
// migrations of its own tables (in a goose version table of their own),
// reconcile checks of its own invariants, the effects `explain` shows for
// a business key, configuration keys of its own, and the servers `dev`
// runs beside the gateway. The command line itself is idemgate.Main; this
// package holds only the options, so that a program (and its tests) can
// name them without importing the command line.
//
//	func main() {
//		idemgate.Main(extension.WithHandlers([]string{"report.build"},
//			func(h *workers.Handlers, w extension.Worker) error {
//				workers.Add(h, "report.build", func(ctx context.Context, j workers.Job[Report]) (string, error) {
//					return buildReport(ctx, w.DB, j)
//				})
//				return nil
//			}))
//	}
//
// idemgate's own binary is idemgate.Main with no option; the example jobs'
// binary, idemgate-examples, is the same call with examples.Options().
package extension
