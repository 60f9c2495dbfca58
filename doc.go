// Package idemgate is the idemgate command line as a Go entry point.
//
// idemgate is an HTTP API gateway that makes retries safe: it requires an
// Idempotency-Key on unsafe requests, stores each request's outcome and
// replays it to retries, and turns requests into queued jobs whose
// workers run each business key's effect once. Main runs every idemgate
// command (serve, worker, dev, migrate, keys, config, dlq, jobs,
// reconcile, explain). The idemgate binary is Main with no option; a
// program that ships its own Go-handler jobs is Main with the options of
// package extension, which add handlers, migrations of its own tables,
// reconcile checks, configuration keys and dev servers:
//
//	func main() {
//		idemgate.Main(extension.WithHandlers([]string{"report.build"},
//			func(h *workers.Handlers, w extension.Worker) error {
//				workers.Add(h, "report.build", reports.Build(w.DB))
//				return nil
//			}))
//	}
//
// examples/cmd/idemgate-examples is such a program: idemgate with the
// example jobs.
package idemgate
