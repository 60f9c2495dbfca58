package gatewaytest

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestSchemasAreTheExamples: the schemas this package keeps are the
// example jobs' own, byte for byte, so the routes it declares are the
// ones deploy/local/idemgate.yaml serves.
func TestSchemasAreTheExamples(t *testing.T) {
	for _, r := range EnqueueRoutes() {
		want, err := os.ReadFile(filepath.Join("..", "..", "examples", "schemas", r.Task+".json"))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(r.Schema, want) {
			t.Errorf("schemas/%s.json differs from examples/schemas/%s.json: copy the example's", r.Task, r.Task)
		}
	}
}
