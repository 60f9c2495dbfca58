// Command idemgate-examples is idemgate with the example jobs: every
// idemgate command, plus the examples' Go handlers, tables, reconcile
// checks, worker.partner_url setting and partnersim in `dev` mode. It is
// how a program ships its own Go-handler jobs: idemgate.Main with options.
package main

import (
	"github.com/idemgate/idemgate"
	"github.com/idemgate/idemgate/examples/demo"
)

func main() { idemgate.Main(demo.Options()...) }
