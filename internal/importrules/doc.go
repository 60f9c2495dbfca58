// Package importrules holds no code: its test checks the direction of
// imports that ARCHITECTURE.md states, with `go list`, so that a change
// which breaks one fails `make test` instead of waiting for a reader to
// rerun the commands by hand. What the libraries a user imports may reach
// matters most: middleware/idempotency the standard library only, the
// worker framework no exporter, no library any part of the product.
package importrules
