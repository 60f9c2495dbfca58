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

// parseOrRefuse parses yaml as x.yaml with no environment. With wantErr
// set it fails unless Parse refuses the file with a problem containing
// wantErr, and returns nil; otherwise it fails unless Parse accepts it.
func parseOrRefuse(t *testing.T, yaml, wantErr string) *Config {
	t.Helper()
	cfg, err := Parse([]byte(yaml), "x.yaml", func(string) string { return "" })
	if wantErr != "" {
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Fatalf("err = %v, want a line %q", err, wantErr)
		}
		return nil
	}
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return cfg
}
