package openapi

import (
	"bytes"
	"encoding/json"

	"go.yaml.in/yaml/v3"

	"github.com/idemgate/idemgate/internal/yamljson"
)

// yamlToJSON converts one YAML document to indented JSON, keeping the
// order of mapping keys (a generic decode would sort them) and numbers as
// written. Keys must be scalars; anchors and aliases are expanded; merge
// keys are refused.
func yamlToJSON(doc []byte) ([]byte, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(doc, &root); err != nil {
		return nil, err
	}
	return nodeToJSON(&root)
}

// nodeToJSON writes a YAML document as indented JSON, as yamlToJSON.
func nodeToJSON(root *yaml.Node) ([]byte, error) {
	compact, err := yamljson.Convert(root)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := json.Indent(&out, compact, "", "  "); err != nil {
		return nil, err
	}
	out.WriteByte('\n')
	return out.Bytes(), nil
}
