// Package e2e holds idemgate's whole-system tests: each starts the program
// as idemgate-examples runs it (gateway, worker, dev, the CLI against a
// running stack) over Redis and PostgreSQL, and checks what a user of it
// would see.
//
// The tests drive idemgate.Run with the examples' options, in this process
// or in a child process that is the test binary re-executed as idemgate, so
// a test can kill a real gateway. Tests of the command line itself, with no
// running system, stay in internal/cli.
//
//	go test -race ./internal/e2e/ -run TestServe
package e2e
