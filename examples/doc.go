// Package examples holds the four example jobs — invoice.create,
// inventory.adjust, payment.charge and notification.send — written exactly
// as a user of the public packages would write them: the jobs are declared
// in configuration (JobsYAML: task, JSON Schema, business key and resource
// templates), and this package only registers a Go function per task with
// workers.Add. The framework validates each payload against its schema,
// derives the business key and resource, scopes both to the submitting
// tenant, refuses a second payload under a key that already has one, takes
// the lock and draws the fencing token before a function here runs.
//
// Each example shows one way of making an effect happen once per business
// key and tenant:
//
//   - invoice.create: a unique constraint, ON CONFLICT DO NOTHING, and a
//     replay that returns the existing invoice;
//   - inventory.adjust: a ledger row keyed by the adjustment and a stock
//     update conditional on the fencing token;
//   - payment.charge: a partner call that carries the same tenant-scoped
//     Idempotency-Key on every attempt, behind a timeout and a circuit
//     breaker; a partner that is down makes the job wait
//     (workers.Unavailable), not fail;
//   - notification.send: a Redis dedup window in front of a PostgreSQL
//     record.
//
// Every row of their tables (migrations 00004 and 00007) carries its tenant:
// two tenants with the same order id have two invoices.
//
//	hs := workers.NewHandlers()
//	err := examples.Register(hs, examples.Business{DB: pool, Redis: rdb, PartnerURL: "http://127.0.0.1:9100"})
//	mux, err := hs.Mux(deps, specs, workers.HTTPDelivery{}) // specs: the declared jobs
//
// Package examples/invariants checks afterwards, from the tables alone, that
// each effect happened once (`idemgate-examples reconcile`), and
// examples/demo wires all of it into idemgate-examples. The shipment.book job of
// deploy/local/idemgate.yaml (its schema in schemas/) has no Go handler: it
// is delivered over HTTP to a receiver of the user's own, examples/shipments
// in Go (package receiver) or examples/receiver-node in TypeScript.
package examples
