package ijson

import (
	"bytes"
	"slices"
)

// AppendCanonical appends the canonical form of the JSON document body to
// dst without building a tree (the fast path of a fingerprint): object members are sorted in place by
// their raw key bytes, which is the decoded order for the keys it accepts.
// It handles the common case only — strings of printable ASCII without
// escapes or the characters encoding/json escapes (<, >, &), no duplicate
// keys, nesting up to maxCanonicalDepth — and reports false for anything
// else, leaving the decision (canonical form or not JSON at all) to the
// general path: decode with UseNumber, Check, WriteCanonical. On true, the
// bytes appended are exactly what WriteCanonical writes for the decoded
// document, and the document is I-JSON. sc may be reused between calls, by
// one goroutine at a time.
func AppendCanonical(dst, body []byte, sc *Scratch) ([]byte, bool) {
	p := canonParser{in: body, out: dst, sc: sc}
	p.space()
	if !p.value(0) {
		return dst, false
	}
	p.space()
	if p.pos != len(p.in) {
		return dst, false
	}
	return p.out, true
}

const maxCanonicalDepth = 32

// Scratch is AppendCanonical's memory, reused between calls to hold object
// members while they are sorted. The zero value is ready.
type Scratch struct {
	members []member
	tmp     []byte
}

// Reset forgets the members held, keeping the memory.
func (s *Scratch) Reset() { s.members = s.members[:0] }

// Cap is the bytes the scratch holds on to, for a pool that drops large
// ones.
func (s *Scratch) Cap() int { return cap(s.tmp) }

// member is one object member already written to out: out[start:end] is
// `"key":value`, key is the raw key between the quotes.
type member struct {
	key        []byte
	start, end int
}

type canonParser struct {
	in  []byte
	pos int
	out []byte
	sc  *Scratch
}

func (p *canonParser) space() {
	for p.pos < len(p.in) {
		switch p.in[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *canonParser) value(depth int) bool {
	if p.pos >= len(p.in) || depth > maxCanonicalDepth {
		return false
	}
	switch c := p.in[p.pos]; {
	case c == '{':
		return p.object(depth)
	case c == '[':
		return p.array(depth)
	case c == '"':
		s, ok := p.str()
		if !ok {
			return false
		}
		p.out = append(p.out, '"')
		p.out = append(p.out, s...)
		p.out = append(p.out, '"')
		return true
	case c == 't':
		return p.literal("true")
	case c == 'f':
		return p.literal("false")
	case c == 'n':
		return p.literal("null")
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	}
	return false
}

func (p *canonParser) literal(lit string) bool {
	if !bytes.HasPrefix(p.in[p.pos:], []byte(lit)) {
		return false
	}
	p.pos += len(lit)
	p.out = append(p.out, lit...)
	return true
}

// str reads a string and returns its raw content. Only what is the same
// raw and decoded, and re-encodes to itself, is accepted.
func (p *canonParser) str() ([]byte, bool) {
	start := p.pos + 1
	for i := start; i < len(p.in); i++ {
		switch c := p.in[i]; {
		case c == '"':
			p.pos = i + 1
			return p.in[start:i], true
		case c < 0x20 || c >= 0x7f || c == '\\' || c == '<' || c == '>' || c == '&':
			return nil, false
		}
	}
	return nil, false
}

// number copies a number as written, checking JSON's grammar:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (p *canonParser) number() bool {
	in := p.in
	i, bad := scanNumber(in, p.pos)
	if bad != "" {
		return false
	}
	if i < len(in) {
		// A number ends at a delimiter; "01" or "1x" is not JSON.
		switch in[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
		default:
			return false
		}
	}
	p.out = append(p.out, in[p.pos:i]...)
	p.pos = i
	return true
}

func (p *canonParser) array(depth int) bool {
	p.pos++ // [
	p.out = append(p.out, '[')
	p.space()
	if p.pos < len(p.in) && p.in[p.pos] == ']' {
		p.pos++
		p.out = append(p.out, ']')
		return true
	}
	for {
		p.space()
		if !p.value(depth + 1) {
			return false
		}
		p.space()
		if p.pos >= len(p.in) {
			return false
		}
		switch p.in[p.pos] {
		case ',':
			p.pos++
			p.out = append(p.out, ',')
		case ']':
			p.pos++
			p.out = append(p.out, ']')
			return true
		default:
			return false
		}
	}
}

func (p *canonParser) object(depth int) bool {
	p.pos++ // {
	p.out = append(p.out, '{')
	p.space()
	if p.pos < len(p.in) && p.in[p.pos] == '}' {
		p.pos++
		p.out = append(p.out, '}')
		return true
	}
	base := len(p.sc.members) // members of enclosing objects stay below
	for {
		p.space()
		if p.pos >= len(p.in) || p.in[p.pos] != '"' {
			return false
		}
		start := len(p.out)
		key, ok := p.str()
		if !ok {
			return false
		}
		p.out = append(p.out, '"')
		p.out = append(p.out, key...)
		p.out = append(p.out, '"', ':')
		p.space()
		if p.pos >= len(p.in) || p.in[p.pos] != ':' {
			return false
		}
		p.pos++
		p.space()
		if !p.value(depth + 1) {
			return false
		}
		p.sc.members = append(p.sc.members, member{key: key, start: start, end: len(p.out)})
		p.space()
		if p.pos >= len(p.in) {
			return false
		}
		if p.in[p.pos] == ',' {
			p.pos++
			continue
		}
		if p.in[p.pos] != '}' {
			return false
		}
		p.pos++
		break
	}
	ms := p.sc.members[base:]
	first := ms[0].start
	if !slices.IsSortedFunc(ms, compareMembers) {
		slices.SortFunc(ms, compareMembers)
	}
	for i := 1; i < len(ms); i++ {
		if bytes.Equal(ms[i-1].key, ms[i].key) {
			return false // a duplicate key: the general path keeps the last
		}
	}
	// Copy the members out in key order, comma separated, then back.
	tmp := p.sc.tmp[:0]
	for i, m := range ms {
		if i > 0 {
			tmp = append(tmp, ',')
		}
		tmp = append(tmp, p.out[m.start:m.end]...)
	}
	p.sc.tmp = tmp
	p.out = append(p.out[:first], tmp...)
	p.out = append(p.out, '}')
	p.sc.members = p.sc.members[:base]
	return true
}

func compareMembers(a, b member) int { return bytes.Compare(a.key, b.key) }
