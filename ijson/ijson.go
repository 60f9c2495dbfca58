package ijson

import (
	"errors"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// ErrNotIJSON is the reason a document is refused: it is JSON, but not
// I-JSON (RFC 7493) — it holds bytes that are not UTF-8, an
// unpaired surrogate escape ("\ud800"), or an object with two members of
// one name. Such a document has no single meaning (one reader keeps the
// first duplicate, another the last; bad bytes become U+FFFD), so it
// has no one canonical form. Check's error is an *Error wrapping it.
var ErrNotIJSON = errors.New("JSON body is not I-JSON")

// ErrTooDeep is the reason CheckDepth refuses a document whose arrays and
// objects nest deeper than the bound its caller set. Such a document may
// be I-JSON; the caller refuses the work of reading it.
var ErrTooDeep = errors.New("JSON body nested too deep")

// Error says where and why a JSON document is not I-JSON, or nests too
// deep for CheckDepth. It wraps ErrNotIJSON, or ErrTooDeep.
type Error struct {
	// Path holds the member names and array indices leading to the
	// offending value (a duplicate name: the object holding it); empty
	// for the whole document.
	Path []string
	// Offset is the byte offset of the fault in the document.
	Offset int
	// Reason says what is wrong, for people.
	Reason string

	tooDeep bool
}

func (e *Error) Error() string {
	if len(e.Path) == 0 {
		return e.Reason + " (byte " + strconv.Itoa(e.Offset) + ")"
	}
	return e.Pointer() + ": " + e.Reason + " (byte " + strconv.Itoa(e.Offset) + ")"
}

func (e *Error) Unwrap() error {
	if e.tooDeep {
		return ErrTooDeep
	}
	return ErrNotIJSON
}

// Pointer is Path as a JSON Pointer (RFC 6901).
func (e *Error) Pointer() string {
	var b strings.Builder
	for _, tok := range e.Path {
		b.WriteByte('/')
		b.WriteString(strings.ReplaceAll(strings.ReplaceAll(tok, "~", "~0"), "/", "~1"))
	}
	return b.String()
}

// Check reports, with an *Error, what keeps doc from being one
// I-JSON document (RFC 7493): a JSON syntax error, bytes that are not
// UTF-8, an escaped surrogate ("\ud800") that is not half of a pair, an
// object with two members whose names are equal once unescaped
// ({"a":1,"\u0061":2}), or nesting deeper than 10000. It returns nil for a
// document whose every reader sees the same values.
func Check(doc []byte) error { return CheckDepth(doc, 0) }

// CheckDepth is Check with a tighter bound on nesting: a document whose
// arrays and objects nest more than maxDepth deep ([[1]] is two deep) is
// refused with an *Error wrapping ErrTooDeep. The scan stops at the first
// array or object past the bound, so the work is bounded by the bytes
// before it. A maxDepth of 0, or of 10000 and more, is Check's own bound.
func CheckDepth(doc []byte, maxDepth int) error {
	s := ijsonScanner{in: doc, maxDepth: maxJSONDepth}
	if maxDepth > 0 && maxDepth < maxJSONDepth {
		s.maxDepth, s.bounded = maxDepth, true
	}
	s.space()
	if err := s.value(0); err != nil {
		return err
	}
	s.space()
	if s.pos != len(s.in) {
		return s.fail(s.pos, "data after the JSON value")
	}
	return nil
}

// maxJSONDepth is encoding/json's nesting limit: the arrays and objects
// a document may nest.
const maxJSONDepth = 10000

// ijsonScanner reads a document once, checking JSON's grammar and
// I-JSON's rules on strings and names; it builds nothing but the member
// names it must compare.
type ijsonScanner struct {
	in   []byte
	pos  int
	path []string // where the scanner is, for errors
	buf  []byte   // a member name being decoded
	// names holds the names of the objects being read, innermost last;
	// each object's start is remembered on the Go stack.
	names []string
	// maxDepth is the arrays and objects the document may nest; bounded
	// is set when it is the caller's bound, not maxJSONDepth.
	maxDepth int
	bounded  bool
}

func (s *ijsonScanner) fail(at int, reason string) *Error {
	return &Error{Path: append([]string(nil), s.path...), Offset: at, Reason: reason}
}

func (s *ijsonScanner) space() {
	for s.pos < len(s.in) {
		switch s.in[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

func (s *ijsonScanner) value(depth int) *Error {
	if s.pos >= len(s.in) {
		return s.fail(s.pos, "unexpected end of JSON")
	}
	switch c := s.in[s.pos]; {
	case (c == '{' || c == '[') && depth >= s.maxDepth:
		return s.tooDeep()
	case c == '{':
		return s.object(depth)
	case c == '[':
		return s.array(depth)
	case c == '"':
		_, err := s.str(false)
		return err
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	case c == '-' || (c >= '0' && c <= '9'):
		return s.number()
	}
	return s.fail(s.pos, "invalid character "+strconv.QuoteRune(rune(s.in[s.pos]))+" looking for a value")
}

// tooDeep refuses the array or object at s.pos, which would nest one
// deeper than s.maxDepth.
func (s *ijsonScanner) tooDeep() *Error {
	if !s.bounded {
		return s.fail(s.pos, "nested deeper than "+strconv.Itoa(maxJSONDepth)+" levels")
	}
	e := s.fail(s.pos, "arrays and objects nested deeper than "+strconv.Itoa(s.maxDepth)+" levels")
	e.tooDeep = true
	return e
}

func (s *ijsonScanner) literal(lit string) *Error {
	if len(s.in)-s.pos < len(lit) || string(s.in[s.pos:s.pos+len(lit)]) != lit {
		return s.fail(s.pos, "invalid literal, want "+lit)
	}
	s.pos += len(lit)
	return nil
}

// number checks -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *ijsonScanner) number() *Error {
	end, bad := scanNumber(s.in, s.pos)
	if bad != "" {
		return s.fail(end, bad)
	}
	s.pos = end
	return nil
}

// scanNumber reads the number at in[i:], by JSON's grammar
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?, and returns where it
// ends. When digits are missing it returns where, and says which are
// missing in bad.
func scanNumber(in []byte, i int) (end int, bad string) {
	digits := func() int {
		n := 0
		for i < len(in) && in[i] >= '0' && in[i] <= '9' {
			i++
			n++
		}
		return n
	}
	if i < len(in) && in[i] == '-' {
		i++
	}
	switch {
	case i < len(in) && in[i] == '0':
		i++
	case digits() == 0:
		return i, "a number needs digits"
	}
	if i < len(in) && in[i] == '.' {
		i++
		if digits() == 0 {
			return i, "a number needs digits after its decimal point"
		}
	}
	if i < len(in) && (in[i] == 'e' || in[i] == 'E') {
		i++
		if i < len(in) && (in[i] == '+' || in[i] == '-') {
			i++
		}
		if digits() == 0 {
			return i, "a number needs digits in its exponent"
		}
	}
	return i, ""
}

// str reads a string at s.pos. With decode it returns the string's value
// in s.buf (valid until the next call); otherwise it only checks it.
func (s *ijsonScanner) str(decode bool) ([]byte, *Error) {
	in := s.in
	out := s.buf[:0]
	for i := s.pos + 1; i < len(in); {
		c := in[i]
		switch {
		case c == '"':
			s.pos = i + 1
			s.buf = out
			return out, nil
		case c == '\\':
			if i+1 >= len(in) {
				return nil, s.fail(i, "unterminated string")
			}
			switch e := in[i+1]; e {
			case '"', '\\', '/':
				out = appendIf(decode, out, e)
				i += 2
			case 'b', 'f', 'n', 'r', 't':
				out = appendIf(decode, out, unescape(e))
				i += 2
			case 'u':
				r, ok := hex4(in[i+2:])
				if !ok {
					return nil, s.fail(i, `\u needs four hexadecimal digits`)
				}
				at := i
				i += 6
				if utf16.IsSurrogate(r) {
					if r >= 0xdc00 {
						return nil, s.fail(at, "a low surrogate escape ("+string(in[at:at+6])+") without a high one before it")
					}
					var low rune
					if i+1 < len(in) && in[i] == '\\' && in[i+1] == 'u' {
						low, ok = hex4(in[i+2:])
					} else {
						ok = false
					}
					if !ok || low < 0xdc00 || low > 0xdfff {
						return nil, s.fail(at, "a high surrogate escape ("+string(in[at:at+6])+") without a low one after it")
					}
					r = utf16.DecodeRune(r, low)
					i += 6
				}
				if decode {
					out = utf8.AppendRune(out, r)
				}
			default:
				return nil, s.fail(i, "invalid escape "+strconv.Quote(string(in[i:i+2])))
			}
		case c < 0x20:
			return nil, s.fail(i, "a control character in a string must be escaped")
		case c < utf8.RuneSelf:
			out = appendIf(decode, out, c)
			i++
		default:
			r, size := utf8.DecodeRune(in[i:])
			if r == utf8.RuneError && size == 1 {
				return nil, s.fail(i, "bytes that are not UTF-8 in a string")
			}
			if decode {
				out = append(out, in[i:i+size]...)
			}
			i += size
		}
	}
	return nil, s.fail(len(in), "unterminated string")
}

func appendIf(ok bool, b []byte, c byte) []byte {
	if ok {
		return append(b, c)
	}
	return b
}

// unescape is the byte a one-letter escape stands for.
func unescape(e byte) byte {
	switch e {
	case 'b':
		return '\b'
	case 'f':
		return '\f'
	case 'n':
		return '\n'
	case 'r':
		return '\r'
	}
	return '\t'
}

func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

func (s *ijsonScanner) array(depth int) *Error {
	s.pos++ // [
	s.space()
	if s.pos < len(s.in) && s.in[s.pos] == ']' {
		s.pos++
		return nil
	}
	for i := 0; ; i++ {
		s.space()
		s.path = append(s.path, strconv.Itoa(i))
		if err := s.value(depth + 1); err != nil {
			return err
		}
		s.path = s.path[:len(s.path)-1]
		s.space()
		if s.pos >= len(s.in) {
			return s.fail(s.pos, "unexpected end of JSON in an array")
		}
		switch s.in[s.pos] {
		case ',':
			s.pos++
		case ']':
			s.pos++
			return nil
		default:
			return s.fail(s.pos, "invalid character "+strconv.QuoteRune(rune(s.in[s.pos]))+" after an array element")
		}
	}
}

// smallObject is the member count up to which names are compared one by
// one; a larger object indexes them.
const smallObject = 16

func (s *ijsonScanner) object(depth int) *Error {
	s.pos++ // {
	s.space()
	if s.pos < len(s.in) && s.in[s.pos] == '}' {
		s.pos++
		return nil
	}
	base := len(s.names)
	defer func() { s.names = s.names[:base] }()
	var index map[string]struct{}
	for {
		s.space()
		if s.pos >= len(s.in) || s.in[s.pos] != '"' {
			return s.fail(s.pos, "an object member needs a name in quotes")
		}
		at := s.pos
		raw, err := s.str(true)
		if err != nil {
			return err
		}
		name := string(raw)
		dup := false
		if index != nil {
			_, dup = index[name]
		} else {
			for _, n := range s.names[base:] {
				if n == name {
					dup = true
					break
				}
			}
		}
		if dup {
			return s.fail(at, "duplicate member name "+quoteName(name))
		}
		s.names = append(s.names, name)
		switch members := s.names[base:]; {
		case index != nil:
			index[name] = struct{}{}
		case len(members) > smallObject:
			index = make(map[string]struct{}, 2*len(members))
			for _, n := range members {
				index[n] = struct{}{}
			}
		}
		s.space()
		if s.pos >= len(s.in) || s.in[s.pos] != ':' {
			return s.fail(s.pos, "an object member needs a colon after its name")
		}
		s.pos++
		s.space()
		s.path = append(s.path, name)
		if err := s.value(depth + 1); err != nil {
			return err
		}
		s.path = s.path[:len(s.path)-1]
		s.space()
		if s.pos >= len(s.in) {
			return s.fail(s.pos, "unexpected end of JSON in an object")
		}
		switch s.in[s.pos] {
		case ',':
			s.pos++
		case '}':
			s.pos++
			return nil
		default:
			return s.fail(s.pos, "invalid character "+strconv.QuoteRune(rune(s.in[s.pos]))+" after an object member")
		}
	}
}

// quoteName quotes a member name for an error message, cut to a length a
// message can hold.
func quoteName(name string) string {
	const maxShown = 64
	if len(name) <= maxShown {
		return strconv.Quote(name)
	}
	cut := maxShown
	for cut > 0 && !utf8.RuneStart(name[cut]) {
		cut--
	}
	return strconv.Quote(name[:cut]) + "…"
}
