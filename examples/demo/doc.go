// Package demo is the example jobs as one idemgate extension: their Go
// handlers and declarations (package examples), the migrations of their
// tables, their reconcile checks (examples/invariants) and the effects
// `explain` shows, the worker.partner_url setting they call the partner
// at, their notification dedup counter, and partnersim beside the gateway
// in `dev` mode. examples/cmd/idemgate-examples is idemgate.Main with
// Options; the same few lines ship any program's own Go-handler jobs.
//
//	func main() { idemgate.Main(demo.Options()...) }
package demo
