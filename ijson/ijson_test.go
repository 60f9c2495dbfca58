package ijson_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/idemgate/idemgate/ijson"
)

func TestCheck(t *testing.T) {
	t.Parallel()
	many := func(extra string) string { // an object past the size compared one by one
		var b strings.Builder
		b.WriteString("{")
		for i := range 40 {
			b.WriteString(`"k` + strconv.Itoa(i) + `":` + strconv.Itoa(i) + ",")
		}
		b.WriteString(extra + "}")
		return b.String()
	}
	for _, doc := range []string{
		`{"a":1,"b":[1,2,{"c":"d"}]}`, `[]`, `{}`, `"x"`, `1.50`, `-0e+7`, `true`, `null`, " \t\n{ \"a\" : [ ] }\r\n",
		`{"a":{"x":1},"b":{"x":1}}`, `[{"a":1},{"a":1}]`, // one name in two objects
		`{"a":1,"A":2}`, `{"é":1,"e\u0301":2}`, // names differ by their code points
		`"\ud83d\ude00"`, `"😀"`, `"\u0000"`, `"\ufffd"`, `"\/\b\f\n\r\t\"\\"`, `{"\u00e9":1}`,
		many(`"k40":40`),
	} {
		if err := ijson.Check([]byte(doc)); err != nil {
			t.Errorf("Check(%q) = %v, want nil", doc, err)
		}
	}
	for _, tc := range []struct {
		doc, pointer, reason string
	}{
		{`{"amount":100,"amount":999}`, "", `duplicate member name "amount"`},
		{`{"a":{"b":[0,{"x":1,"y":2,"x":3}]}}`, "/a/b/1", `duplicate member name "x"`},
		{`{"a":1,"\u0061":2}`, "", `duplicate member name "a"`},
		{`{"é":1,"\u00e9":2}`, "", `duplicate member name "é"`},
		{many(`"k7":7`), "", `duplicate member name "k7"`},
		{"{\"a\":\"\xff\"}", "/a", "not UTF-8"},
		{"{\"\xc3\":1}", "", "not UTF-8"},
		{"\"\xed\xa0\x80\"", "", "not UTF-8"}, // a surrogate encoded in UTF-8
		{`["\ud800"]`, "/0", "high surrogate"},
		{`{"a~/b":"\udc00"}`, "/a~0~1b", "low surrogate"},
		{`"\ud800\u0041"`, "", "high surrogate"},
		{`"\ud800\ud800"`, "", "high surrogate"},
		{`{"a":1} x`, "", "after the JSON value"},
		{`{"a":1,}`, "", "name in quotes"},
		{`01`, "", "after the JSON value"},
		{``, "", "end of JSON"},
		{`"\x"`, "", "invalid escape"},
		{"\"a\tb\"", "", "control character"},
	} {
		err := ijson.Check([]byte(tc.doc))
		var je *ijson.Error
		if !errors.As(err, &je) || !errors.Is(err, ijson.ErrNotIJSON) {
			t.Errorf("Check(%q) = %v, want an *Error wrapping ErrNotIJSON", tc.doc, err)
			continue
		}
		if je.Pointer() != tc.pointer || !strings.Contains(je.Reason, tc.reason) {
			t.Errorf("Check(%q) = %q at %q, want %q at %q", tc.doc, je.Reason, je.Pointer(), tc.reason, tc.pointer)
		}
	}
}

// TestFingerprintTellsRequestsApart: two bodies that mean different things
// — or whose meaning cannot be told — never share a fingerprint. Each pair
// was one fingerprint when encoding/json decided for us (the last
// duplicate wins; bad bytes and lone surrogates become U+FFFD).
// FuzzCheck compares Check with a reference made of other parts:
// json.Valid for the grammar, utf8.Valid for the bytes, a scan of the
// escapes for surrogates and encoding/json's tokens for duplicate names
// (exact once the first two hold).
func FuzzCheck(f *testing.F) {
	for _, s := range []string{
		`{"a":1,"b":[1,2,{"c":"d"}]}`, `{"a":1,"a":2}`, `{"a":1,"\u0061":2}`, `[{"a":{"a":1}}]`,
		"{\"a\":\"\xff\"}", `"\ud800"`, `"\udc00"`, `"\ud83d\ude00"`, `"\ud800\u0041"`, `"\\ud800"`,
		`{"a":[],"b":{},"c":null,"d":true,"e":false,"f":-1.5e+3}`, `not json`, ``, `{"a":1} x`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		err := ijson.Check(doc)
		if err != nil && !errors.Is(err, ijson.ErrNotIJSON) {
			t.Fatalf("Check(%q) = %v, which does not wrap ErrNotIJSON", doc, err)
		}
		if !json.Valid(doc) {
			if err == nil {
				t.Fatalf("Check accepted %q, which is not JSON", doc)
			}
			return
		}
		want := utf8.Valid(doc) && !loneSurrogate(doc) && !duplicateNames(t, doc)
		if (err == nil) != want {
			t.Fatalf("Check(%q) = %v; the reference says I-JSON: %v", doc, err, want)
		}
	})
}

// loneSurrogate reports whether valid JSON doc escapes a surrogate that is
// not half of a pair.
func loneSurrogate(doc []byte) bool {
	code := func(i int) int64 {
		if i+6 > len(doc) || doc[i] != '\\' || doc[i+1] != 'u' {
			return -1
		}
		n, err := strconv.ParseInt(string(doc[i+2:i+6]), 16, 32)
		if err != nil {
			return -1
		}
		return n
	}
	for i := 0; i < len(doc); i++ {
		if doc[i] != '\\' {
			continue
		}
		c := code(i)
		switch {
		case c >= 0xd800 && c <= 0xdbff:
			if next := code(i + 6); next < 0xdc00 || next > 0xdfff {
				return true
			}
			i += 11
		case c >= 0xdc00 && c <= 0xdfff:
			return true
		default:
			i++ // the escaped character
		}
	}
	return false
}

// duplicateNames reports whether valid JSON doc has an object with two
// members of one (decoded) name.
func duplicateNames(t *testing.T, doc []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	type frame struct {
		object bool
		names  map[string]bool
		key    bool // the next string token is a name
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return false
		}
		if err != nil {
			t.Fatalf("decoding valid JSON %q: %v", doc, err)
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.object && top.key {
			if d, ok := tok.(json.Delim); ok && d == '}' {
				stack = stack[:len(stack)-1]
				continue
			}
			name := tok.(string)
			if top.names[name] {
				return true
			}
			top.names[name] = true
			top.key = false
			continue
		}
		if top != nil && top.object {
			top.key = true // this token is the member's value
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{object: true, names: map[string]bool{}, key: true})
		case json.Delim('['):
			stack = append(stack, &frame{})
		case json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
	}
}

// CheckDepth refuses nesting past its bound where it starts, and only
// nesting: [[1]] is two deep, and a document at the bound is taken.
func TestCheckDepth(t *testing.T) {
	t.Parallel()
	nest := func(n int) string { return strings.Repeat(`{"a":[`, n) + "1" + strings.Repeat("]}", n) }
	for _, tc := range []struct {
		name   string
		doc    string
		max    int
		offset int // where the refusal points; -1 for none
	}{
		{"scalar", `1`, 1, -1},
		{"at the bound", nest(2), 4, -1},
		{"one past", nest(2) + "", 3, 11},
		{"empty past", `[[]]`, 1, 1},
		{"wide at the bound", `[[1],[2],{"x":[3]}]`, 2, 14},
		{"far past, cut early", nest(5000), 64, 6 * 32},
		{"zero is Check's bound", nest(200), 0, -1},
	} {
		err := ijson.CheckDepth([]byte(tc.doc), tc.max)
		var je *ijson.Error
		switch {
		case tc.offset < 0 && err != nil:
			t.Errorf("%s: CheckDepth(%d) = %v, want nil", tc.name, tc.max, err)
		case tc.offset >= 0 && (!errors.As(err, &je) || !errors.Is(err, ijson.ErrTooDeep) || errors.Is(err, ijson.ErrNotIJSON)):
			t.Errorf("%s: CheckDepth(%d) = %v, want an *Error wrapping ErrTooDeep alone", tc.name, tc.max, err)
		case tc.offset >= 0 && (je.Offset != tc.offset || len(je.Path) != tc.max):
			t.Errorf("%s: refused at byte %d under %q, want byte %d, %d levels down", tc.name, je.Offset, je.Pointer(), tc.offset, tc.max)
		}
	}
	// Past encoding/json's own bound the document is no JSON every reader
	// takes, whatever bound the caller set.
	deep := strings.Repeat("[", 10001) + strings.Repeat("]", 10001)
	for _, max := range []int{0, 10000, 20000} {
		if err := ijson.CheckDepth([]byte(deep), max); !errors.Is(err, ijson.ErrNotIJSON) {
			t.Errorf("CheckDepth(10001 deep, %d) = %v, want ErrNotIJSON", max, err)
		}
	}
	if err := ijson.Check([]byte(deep[1 : len(deep)-1])); err != nil {
		t.Errorf("Check(10000 deep) = %v, want nil", err)
	}
}
