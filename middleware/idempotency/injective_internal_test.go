package idempotency

import (
	"encoding/binary"
	"encoding/json"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/idemgate/idemgate/ijson"
)

// checkInjective asserts the property that keeps two requests apart: the
// body part of a fingerprint's preimage determines the body's meaning.
// Sent as JSON, a body is either refused, hashed as its own bytes (not
// JSON), or hashed as a canonical form that decodes to exactly the
// document the body is — every string's code points, every number as
// written, every member, duplicates included. Equal canonical forms then
// mean equal documents, so two different documents never share one.
func checkInjective(t *testing.T, body []byte) {
	f, _ := NewFingerprinter(nil, nil)
	pre, err := f.body(nil, body, true, new(fingerprintScratch))
	if err != nil {
		if ijson.Check(body) == nil {
			t.Fatalf("%q refused (%v), but it is I-JSON", body, err)
		}
		return
	}
	tag, rest := field(t, pre)
	part, rest := field(t, rest)
	if len(rest) != 0 {
		t.Fatalf("%q: %d bytes after the body's field", body, len(rest))
	}
	switch string(tag) {
	case "raw":
		if string(part) != string(body) {
			t.Fatalf("%q hashed as raw bytes %q", body, part)
		}
		if json.Valid(body) {
			t.Fatalf("%q is JSON but was hashed as raw bytes", body)
		}
	case "json":
		want, got := refDoc(t, body), refDoc(t, part)
		if !reflect.DeepEqual(want, got) {
			t.Fatalf("canonical form %q of %q means %#v, not %#v", part, body, got, want)
		}
		again, err := f.body(nil, part, true, new(fingerprintScratch))
		if err != nil || string(again) != string(pre) {
			t.Fatalf("the canonical form %q is not its own canonical form (%v)", part, err)
		}
	default:
		t.Fatalf("%q: tag %q", body, tag)
	}
}

func field(t *testing.T, b []byte) ([]byte, []byte) {
	n, k := binary.Uvarint(b)
	if k <= 0 || uint64(len(b)-k) < n {
		t.Fatalf("bad field in %q", b)
	}
	return b[k : k+int(n)], b[k+int(n):]
}

// refMember and refDoc are a reference reading of a JSON document that
// loses nothing: strings are their exact code points (a lone surrogate
// and bytes that are not UTF-8 are kept as they are, not replaced), and an
// object is all its members, sorted by name, duplicates included.
type refMember struct {
	Name  string
	Value any
}

type refNumber string

func refDoc(t *testing.T, doc []byte) any {
	if !json.Valid(doc) {
		t.Fatalf("%q is not JSON", doc)
	}
	p := refParser{in: doc}
	return p.value()
}

type refParser struct {
	in  []byte
	pos int
}

func (p *refParser) space() {
	for p.pos < len(p.in) && strings.IndexByte(" \t\r\n", p.in[p.pos]) >= 0 {
		p.pos++
	}
}

func (p *refParser) value() any {
	p.space()
	switch c := p.in[p.pos]; c {
	case '{':
		p.pos++
		var ms []refMember
		for {
			p.space()
			if p.in[p.pos] == '}' {
				p.pos++
				break
			}
			if p.in[p.pos] == ',' {
				p.pos++
				p.space()
			}
			name := p.str()
			p.space()
			p.pos++ // :
			ms = append(ms, refMember{name, p.value()})
			p.space()
		}
		slices.SortStableFunc(ms, func(a, b refMember) int { return strings.Compare(a.Name, b.Name) })
		return ms
	case '[':
		p.pos++
		vs := []any{}
		for {
			p.space()
			if p.in[p.pos] == ']' {
				p.pos++
				return vs
			}
			if p.in[p.pos] == ',' {
				p.pos++
			}
			vs = append(vs, p.value())
		}
	case '"':
		return p.str()
	}
	start := p.pos
	for p.pos < len(p.in) && strings.IndexByte(",]} \t\r\n", p.in[p.pos]) < 0 {
		p.pos++
	}
	return refNumber(p.in[start:p.pos]) // numbers and literals as written
}

// str reads a string: raw bytes as they are, escapes as their code point,
// a lone surrogate escape as the bytes its code point would take in UTF-8
// if it were allowed (so it differs from U+FFFD).
func (p *refParser) str() string {
	var b []byte
	p.pos++ // "
	for {
		c := p.in[p.pos]
		switch {
		case c == '"':
			p.pos++
			return string(b)
		case c != '\\':
			b = append(b, c)
			p.pos++
			continue
		}
		e := p.in[p.pos+1]
		if e != 'u' {
			b = append(b, map[byte]byte{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}[e])
			p.pos += 2
			continue
		}
		r := hexRune(p.in[p.pos+2 : p.pos+6])
		p.pos += 6
		if r >= 0xd800 && r < 0xdc00 && p.pos+6 <= len(p.in) && p.in[p.pos] == '\\' && p.in[p.pos+1] == 'u' {
			if low := hexRune(p.in[p.pos+2 : p.pos+6]); low >= 0xdc00 && low <= 0xdfff {
				b = utf8.AppendRune(b, utf16.DecodeRune(r, low))
				p.pos += 6
				continue
			}
		}
		if utf16.IsSurrogate(r) {
			b = append(b, 0xed, byte(0x80|(r>>6)&0x3f), byte(0x80|r&0x3f))
			continue
		}
		b = utf8.AppendRune(b, r)
	}
}

func hexRune(h []byte) rune {
	n, _ := strconv.ParseUint(string(h), 16, 32)
	return rune(n)
}

// injectiveSeeds are documents in canonical form and out of it, nested and
// flat, that the fuzzer starts from.
var injectiveSeeds = []string{
	`{"b":1,"a":[true,false,null,-0.5e+3,"x"],"c":{"z":{},"y":[]}}`,
	` { "amount" : 100 , "currency" : "EUR" } `,
	`{"a":1,"a":2}`, `{"note":"caf\u00e9"}`, `{"html":"<b>&"}`, `01`, `{"a":1} x`,
}

func TestCanonicalKeepsMeaning(t *testing.T) {
	t.Parallel()
	for _, s := range append(slices.Clone(injectiveSeeds),
		`{"amount":100,"amount":999}`, "{\"a\":\"\xff\"}", `"\ud800"`, `"\udc00\ud800"`, `{"\ufffd":1}`,
		`{"s":"\u2028<>&\u0000\u001f\"\\"}`, `{"b":{"z":1,"a":[{"y":2,"x":3}]},"a":"\ud83d\ude00"}`, `[1.0,1,1e0,-0]`) {
		checkInjective(t, []byte(s))
	}
}

// FuzzCanonicalInjective: no two different documents share a canonical
// form, so none share a fingerprint.
func FuzzCanonicalInjective(f *testing.F) {
	for _, s := range injectiveSeeds {
		f.Add([]byte(s))
	}
	f.Add([]byte(`{"amount":100,"amount":999}`))
	f.Add([]byte("{\"a\":\"\xff\"}"))
	f.Add([]byte(`["\ud800","\u00e9\u2028"]`))
	f.Fuzz(checkInjective)
}
