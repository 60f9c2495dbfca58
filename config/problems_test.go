package config

import (
	"slices"
	"strings"
	"testing"
)

// wantProblems parses yaml as the file name and fails unless Parse
// refuses it with exactly want, one problem a line, in that order.
func wantProblems(t *testing.T, yaml, name string, want []string, opts ...Option) {
	t.Helper()
	_, err := Parse([]byte(yaml), name, nil, opts...)
	if err == nil {
		t.Fatal("Parse accepted the configuration")
	}
	if got := strings.Split(err.Error(), "\n"); !slices.Equal(got, want) {
		t.Errorf("problems:\n%s\nwant:\n%s", err, strings.Join(want, "\n"))
	}
}
