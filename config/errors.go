package config

import (
	"strconv"
	"strings"
)

// Error is one mistake in a configuration, at its file and line.
type Error struct {
	// File is the name given to Load or Parse.
	File string
	// Line is 1-based; 0 when unknown.
	Line int
	// Key is the key path, like routes[1].idempotency.lease; "" when the
	// mistake is with the file as a whole.
	Key string
	// Message says what is wrong, in one line.
	Message string
}

// Error formats e as FILE:LINE: KEY: MESSAGE, leaving out the parts that
// are unknown.
func (e Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		if b.Len() > 0 {
			b.WriteByte(':')
		}
		b.WriteString(strconv.Itoa(e.Line))
	}
	if b.Len() > 0 {
		b.WriteString(": ")
	}
	if e.Key != "" {
		b.WriteString(e.Key)
		b.WriteString(": ")
	}
	b.WriteString(e.Message)
	return b.String()
}

// Errors is every mistake found in a configuration, in file order (those
// without a line last). Load and Parse return it as their error.
type Errors struct {
	List []Error
}

// Error prints one mistake per line.
func (e *Errors) Error() string {
	lines := make([]string, len(e.List))
	for i, err := range e.List {
		lines[i] = err.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap returns each Error, as errors.Join would.
func (e *Errors) Unwrap() []error {
	errs := make([]error, len(e.List))
	for i, err := range e.List {
		errs[i] = err
	}
	return errs
}
