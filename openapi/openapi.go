// Package openapi holds the OpenAPI 3.0.3 description of everything the
// gateway itself serves, embedded so `GET /openapi.yaml` always matches the
// binary.
//
//	w.Write(openapi.Spec)
package openapi

import _ "embed"

// Spec is openapi.yaml.
//
//go:embed openapi.yaml
var Spec []byte
