package ijson

import (
	"bytes"
	"testing"
)

// canonicalSeeds are documents the fast path takes and documents it must
// leave to the general path.
var canonicalSeeds = []string{
	`{"b":1,"a":[true,false,null,-0.5e+3,"x"],"c":{"z":{},"y":[]}}`,
	` { "amount" : 100 , "currency" : "EUR" } `,
	`[1,2,{"b":{"d":1,"c":2},"a":0}]`,
	`"plain"`, `0`, `-0`, `1E+2`, `[]`, `{}`,
	`{"a":1,"a":2}`, `{"note":"caf\u00e9"}`, `{"html":"<b>&"}`, `{"é":1}`,
	`01`, `1.`, `.5`, `-`, `1e`, `{"a":1,}`, `[1,]`, `{"a" 1}`, `tru`, `nul`, `{"a":1} x`, ``, `  `,
	`[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]`,
}

// checkCanonical asserts that whenever the fast path gives an answer, it
// is byte for byte the general path's.
func checkCanonical(t *testing.T, body []byte) {
	var sc Scratch
	fast, ok := AppendCanonical(nil, body, &sc)
	if !ok {
		return
	}
	doc, err := Decode(body)
	if err != nil {
		t.Fatalf("fast path accepted %q, which is not one JSON document", body)
	}
	var slow bytes.Buffer
	WriteCanonical(&slow, doc)
	if !bytes.Equal(fast, slow.Bytes()) {
		t.Fatalf("canonical form of %q: fast %q, general %q", body, fast, slow.Bytes())
	}
}

func TestAppendCanonicalMatchesWriteCanonical(t *testing.T) {
	t.Parallel()
	took := 0
	for _, s := range canonicalSeeds {
		checkCanonical(t, []byte(s))
		if _, ok := AppendCanonical(nil, []byte(s), &Scratch{}); ok {
			took++
		}
	}
	// The fast path must actually carry the common documents.
	for _, s := range []string{canonicalSeeds[0], canonicalSeeds[1], canonicalSeeds[2]} {
		if _, ok := AppendCanonical(nil, []byte(s), &Scratch{}); !ok {
			t.Errorf("fast path refused the plain document %s", s)
		}
	}
	for _, s := range []string{`{"a":1,"a":2}`, `{"note":"caf\u00e9"}`, `{"html":"<b>&"}`, `01`, `{"a":1} x`} {
		if _, ok := AppendCanonical(nil, []byte(s), &Scratch{}); ok {
			t.Errorf("fast path took %s, which only the general path canonicalises right", s)
		}
	}
	if took == 0 {
		t.Fatal("fast path took no seed")
	}
}

// FuzzAppendCanonical compares the fast canonicaliser with the general one.
func FuzzAppendCanonical(f *testing.F) {
	for _, s := range canonicalSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) { checkCanonical(t, body) })
}
