package config

import (
	"strconv"
	"strings"
)

// Problem is one mistake in a configuration.
type Problem struct {
	// File is the name given to Load or Parse.
	File string
	// Line is 1-based; 0 when unknown.
	Line int
	// Key is the key path, like routes[1].idempotency.lease; "" when the
	// problem is with the file as a whole.
	Key string
	// Message says what is wrong, in one line.
	Message string
}

// Error formats p as FILE:LINE: KEY: MESSAGE, leaving out the parts that
// are unknown.
func (p Problem) Error() string {
	var b strings.Builder
	b.WriteString(p.File)
	if p.Line > 0 {
		if b.Len() > 0 {
			b.WriteByte(':')
		}
		b.WriteString(strconv.Itoa(p.Line))
	}
	if b.Len() > 0 {
		b.WriteString(": ")
	}
	if p.Key != "" {
		b.WriteString(p.Key)
		b.WriteString(": ")
	}
	b.WriteString(p.Message)
	return b.String()
}

// Problems is every mistake found in a configuration, in file order
// (problems without a line last). Load and Parse return it as their error.
type Problems struct {
	List []Problem
}

// Error prints one problem per line.
func (p *Problems) Error() string {
	lines := make([]string, len(p.List))
	for i, pr := range p.List {
		lines[i] = pr.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap returns each Problem, as errors.Join would.
func (p *Problems) Unwrap() []error {
	errs := make([]error, len(p.List))
	for i, pr := range p.List {
		errs[i] = pr
	}
	return errs
}
