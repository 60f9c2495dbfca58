package openapi

// YAMLToJSON exposes the converter behind SpecJSON to the tests.
var YAMLToJSON = yamlToJSON
