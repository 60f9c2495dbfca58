// Package chaos is idemgate's fault suite: it breaks the servers and
// processes a deployment depends on while clients retry, and counts what a
// user would notice — a request applied twice, two clients told two
// different things, an accepted job that never runs.
//
// Each run starts its own Redis and PostgreSQL on free loopback ports
// (never the shared ones), a TCP fault proxy (package faultproxy) between
// the idemgate processes and PostgreSQL, a naive upstream in process that
// applies every request it receives and records each key's fencing
// tokens, and for every scenario two gateways and the workers it needs
// (bin/idemgate serve and worker). Clients send each key three times at
// once and retry on 409, 429, 5xx and connection errors until a final
// answer. The failover and partition scenarios (failover.go) run on
// deployments of their own instead (deploy.go, replicas.go): a Redis
// primary with two replicas and a sentinel, or a PostgreSQL primary with
// a standby, each replica reading its primary's stream through a
// faultproxy in delay mode, so that it lags by a set amount and a crash
// of the primary loses exactly that tail; or one gateway and one worker
// given their own proxy to a server, to cut them alone. The fault comes
// under that load; then each row of the report is checked against one
// list of guarantees (guarantees.go), one of them that every key's
// history — each client exchange, each upstream application with its
// token — is explained by history.KeyModel.
//
//	rep, err := chaos.Run(ctx, chaos.Options{Idemgate: "bin/idemgate", Short: true})
//	if err != nil {
//		return err // the suite could not run
//	}
//	_ = rep.WriteTable(os.Stdout)
//	if rep.Failed() { … } // a guarantee broke
//
// Every process it starts is in a process group of its own, stopped when
// the run ends, and killed by the kernel if the suite dies first.
package chaos
