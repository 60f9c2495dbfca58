// Package reference writes the reference pages of the documentation from
// the code, so that what a user reads is what the program accepts:
// docs/reference/configuration.md from the configuration structs' yaml
// tags, doc comments and defaults, problems.md from the gateway's problem
// table, metrics.md from the series the code registers, and cli.md from
// the commands' usage text.
//
// Its test compares each page with what the code makes now and fails when
// a page is stale;
//
//	go test ./internal/reference -run TestReference -update
//
// writes them.
package reference
