// Command idemgate is the idempotency gateway: `idemgate serve` runs it,
// `idemgate worker` runs its job workers, and the other subcommands manage
// the schema, the configuration, idempotency records, dead letters and
// jobs. It is idemgate.Main with no extension: the jobs it runs are
// delivered over HTTP; a program with Go-handler jobs is built the same
// way with its own options (examples/cmd/idemgate-examples).
package main

import "github.com/idemgate/idemgate"

func main() { idemgate.Main() }
