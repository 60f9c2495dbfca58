package examples

import _ "embed"

// JobsYAML declares the four example jobs with inline schemas, for config.WithDefaultJobs.
//
//go:embed jobs.yaml
var JobsYAML []byte
