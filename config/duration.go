package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/idemgate/idemgate/config/internal/strictyaml"
)

// Duration is a time.Duration written as a Go duration string ("30s").
type Duration time.Duration

func (d Duration) String() string { return time.Duration(d).String() }

// MarshalYAML writes d as a Go duration string.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// UnmarshalYAML reads a Go duration string. A bare number is refused
// rather than guessed at: "30" could mean seconds or nanoseconds.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, msg := parseDuration(n)
	if msg != "" {
		// A *yaml.TypeError lets the decoder go on and report the
		// other mistakes too.
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %s", n.Line, msg)}}
	}
	*d = v
	return nil
}

func parseDuration(n *yaml.Node) (Duration, string) {
	if n.Kind != yaml.ScalarNode {
		return 0, "must be a duration such as 30s, not " + strictyaml.Describe(n)
	}
	d, err := time.ParseDuration(strings.TrimSpace(n.Value))
	if err != nil {
		return 0, fmt.Sprintf("%q is not a duration (use %s)", n.Value, durationHint(strings.TrimSpace(n.Value)))
	}
	return Duration(d), ""
}

func durationHint(s string) string {
	if isDecimal(s) {
		return s + "s"
	}
	if days, ok := strings.CutSuffix(s, "d"); ok {
		if n, err := strconv.Atoi(days); err == nil && n > 0 && n <= 10000 {
			return fmt.Sprintf("%dh", 24*n)
		}
	}
	return "a Go duration such as 30s, 5m or 1h30m"
}

func isDecimal(s string) bool {
	s = strings.TrimPrefix(s, "-")
	digits, dots := 0, 0
	for _, c := range s {
		switch {
		case c >= '0' && c <= '9':
			digits++
		case c == '.':
			dots++
		default:
			return false
		}
	}
	return digits > 0 && dots <= 1
}
