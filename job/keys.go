package job

import (
	"fmt"
	"strings"
	"unicode"
)

// MaxKeyBytes is the longest business key or resource, in bytes, a
// payload may form. Both are columns of unique indexes in PostgreSQL,
// whose btree refuses an index row above about 2,700 bytes, and the
// business key is sent as the delivery's Idempotency-Key header.
// A flow-limit key value has no such bound: a long one is shortened
// where it names a budget (workers/flowlimit).
const MaxKeyBytes = 512

// renderKey renders t as render does, then adds the faults of the key it
// formed (keyFaults) with max as its bound.
func renderKey(what string, t Template, data any, max int, faults []FieldError) (string, []FieldError) {
	n := len(faults)
	key, faults := render(t, data, faults)
	if len(faults) > n {
		return "", faults
	}
	return key, append(faults, t.keyFaults(what, data, key, max, false)...)
}

// keyFaults reports what keeps key, which t rendered from data, from being
// stored and sent: a field value holding a control character (a key goes
// in an HTTP header, a Redis key and PostgreSQL text, and a CR, LF or NUL
// breaks one of them), and a key longer than max bytes (max 0: no bound).
// what names the key in the messages ("business key"). A field the
// template cannot render is reported as render reports it; for a limit's
// key, {tenant} is not a payload field and is skipped.
func (t Template) keyFaults(what string, data any, key string, max int, limitKey bool) []FieldError {
	var faults []FieldError
	longest, longestLen := "", -1
	for _, p := range t.parts {
		if p.path == nil || limitKey && len(p.path) == 1 && p.path[0] == tenantField {
			continue
		}
		s, err := renderField(data, p.path)
		if err != nil {
			faults = append(faults, fieldError(err))
			continue
		}
		field := strings.Join(p.path, ".")
		if r, ok := controlRune(s); ok {
			faults = append(faults, FieldError{Field: field,
				Message: fmt.Sprintf("holds the control character %U, which a %s may not hold", r, what)})
		}
		if len(s) > longestLen {
			longest, longestLen = field, len(s)
		}
	}
	if max > 0 && len(key) > max {
		faults = append(faults, FieldError{Field: longest,
			Message: fmt.Sprintf("forms a %s of %d bytes; at most %d are allowed", what, len(key), max)})
	}
	return faults
}

// controlRune returns the first control character of s: C0 (U+0000 to
// U+001F, tab included), DEL and C1 (U+0080 to U+009F). A payload is
// I-JSON, so s is UTF-8.
func controlRune(s string) (rune, bool) {
	for _, r := range s {
		if unicode.IsControl(r) {
			return r, true
		}
	}
	return 0, false
}
