package config

import (
	"bytes"
	"fmt"
	"strings"
)

// envRef is a problem with a ${VAR} reference, at its line and column in
// the expanded text.
type envRef struct {
	line, col int
	msg       string
}

// expand replaces ${VAR} and ${VAR:-default} in data with values from
// getenv, outside comments. A reference to a variable that is unset (or
// empty) and has no default is reported and replaced by nothing; $${ is a
// literal ${. The expansion is textual, as with envsubst, so that a
// reference can stand for a number as well as a string.
func expand(data []byte, getenv func(string) string) ([]byte, []envRef) {
	var out bytes.Buffer
	out.Grow(len(data))
	var refs []envRef
	for lineNo := 1; len(data) > 0; lineNo++ {
		line, rest, nl := bytes.Cut(data, []byte("\n"))
		data = rest
		start := out.Len()
		var quote byte // the quote of the scalar being scanned, if any
		for i := 0; i < len(line); i++ {
			c := line[i]
			prevBlank := i == 0 || line[i-1] == ' ' || line[i-1] == '\t'
			switch {
			case quote == 0 && c == '#' && prevBlank:
				out.Write(line[i:]) // a comment: copied as written
				i = len(line)
				continue
			case quote == 0 && (c == '"' || c == '\'') && (prevBlank || strings.IndexByte("[{,:", line[i-1]) >= 0):
				quote = c
			case quote == '"' && c == '\\' && i+1 < len(line):
				out.Write(line[i : i+2])
				i++
				continue
			case quote == '\'' && c == '\'' && i+1 < len(line) && line[i+1] == '\'':
				out.WriteString("''")
				i++
				continue
			case quote != 0 && c == quote:
				quote = 0
			case c == '$' && bytes.HasPrefix(line[i:], []byte("$${")):
				out.WriteString("${")
				i += 2
				continue
			case c == '$' && bytes.HasPrefix(line[i:], []byte("${")):
				col := out.Len() - start + 1
				end := bytes.IndexByte(line[i:], '}')
				if end < 0 {
					refs = append(refs, envRef{lineNo, col, fmt.Sprintf("%q has no closing }", string(line[i:]))})
					out.Write(line[i:])
					i = len(line)
					continue
				}
				ref := string(line[i : i+end+1])
				value, msg := lookup(ref, getenv)
				if msg != "" {
					refs = append(refs, envRef{lineNo, col, msg})
				}
				out.WriteString(value)
				i += end
				continue
			}
			out.WriteByte(c)
		}
		if nl {
			out.WriteByte('\n')
		}
	}
	return out.Bytes(), refs
}

// lookup resolves one ${NAME} or ${NAME:-default} reference.
func lookup(ref string, getenv func(string) string) (string, string) {
	inner := ref[2 : len(ref)-1]
	name, def, hasDef := strings.Cut(inner, ":-")
	if !isEnvName(name) {
		return ref, fmt.Sprintf("%q is not a variable name (use ${NAME} or ${NAME:-default})", name)
	}
	v := getenv(name)
	if v == "" {
		if !hasDef {
			return "", fmt.Sprintf("${%s} is not set and has no default (write ${%s:-default} for one)", name, name)
		}
		v = def
	}
	if strings.ContainsAny(v, "\r\n") {
		return "", fmt.Sprintf("${%s} holds a line break; only one-line values can be expanded", name)
	}
	return v, ""
}

func isEnvName(s string) bool {
	if s == "" || s[0] >= '0' && s[0] <= '9' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}
