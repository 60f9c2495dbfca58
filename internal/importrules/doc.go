// Package importrules holds no code: its tests check ARCHITECTURE.md
// against the code, so that a change which breaks the map fails `make
// test` instead of waiting for a reader. They check the direction of
// imports the document states, with `go list` (what the libraries a user
// imports may reach matters most: middleware/idempotency and problem the
// standard library only, the worker framework no exporter, no library any
// part of the product, no error report the idempotency middleware); that its imports table is the graph go list reports
// (`go test ./internal/importrules -run TestArchitectureImports -update`
// writes it); that every package has its line; that its endpoints are
// those the gateway registers; and that every Go name it gives is
// declared.
package importrules
