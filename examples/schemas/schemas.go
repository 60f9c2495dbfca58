package schemas

import "embed"

//go:embed *.json
var files embed.FS

// Read returns the schema of the example job task as its file holds it.
// The slice is the caller's own.
func Read(task string) ([]byte, error) {
	return files.ReadFile(task + ".json")
}
