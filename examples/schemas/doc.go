// Package schemas holds the JSON Schemas of the example jobs, one file
// per task named <task>.json: the files deploy/local/idemgate.yaml
// declares with schema_file, embedded so that Go code reads the same
// text rather than a copy of it.
//
// It is apart from package examples and imports nothing of idemgate so
// that any package may use the schemas without a cycle: examples imports
// workers, which imports job and enqueue.
//
//	doc, err := schemas.Read("invoice.create")
package schemas
