package yamljson

import (
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

func TestConvert(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"keys keep their order", "b: 1\na: {d: [x, 'y', \"z\"], c: null}\n", `{"b":1,"a":{"d":["x","y","z"],"c":null}}`},
		{"numbers as written", "a: 1.50\nb: -2e3\nc: 0x1F\nd: +7\ne: 1_000\nf: .5\n", `{"a":1.50,"b":-2e3,"c":31,"d":7,"e":1000,"f":0.5}`},
		{"booleans and strings that look like others", "a: true\nb: 'true'\nc: \"1\"\nd: 2026-12-03\ne: <b>\n", `{"a":true,"b":"true","c":"1","d":"2026-12-03","e":"<b>"}`},
		{"aliases are expanded", "def: &d {type: string}\nuse: *d\n", `{"def":{"type":"string"},"use":{"type":"string"}}`},
		{"an empty document", "", `null`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var n yaml.Node
			if err := yaml.Unmarshal([]byte(tc.yaml), &n); err != nil {
				t.Fatal(err)
			}
			got, err := Convert(&n)
			if err != nil || string(got) != tc.want {
				t.Errorf("Convert = %s, %v; want %s", got, err, tc.want)
			}
		})
	}

	// A billion laughs: a few lines whose aliases expand without bound.
	laughs := "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
	for i, prev := 'b', 'a'; i <= 'j'; i, prev = i+1, i {
		laughs += string(i) + ": &" + string(i) + " [" + strings.Repeat("*"+string(prev)+", ", 9) + "*" + string(prev) + "]\n"
	}
	var n yaml.Node
	if err := yaml.Unmarshal([]byte(laughs), &n); err != nil {
		t.Fatal(err)
	}
	if _, err := Convert(&n); err == nil || !strings.Contains(err.Error(), "too large") {
		t.Errorf("a billion laughs: %v, want refused as too large", err)
	}
}

func TestConvertRefuses(t *testing.T) {
	t.Parallel()
	for yamlDoc, want := range map[string]string{
		"a: [\n":          "",
		"<<: {a: 1}\n":    "merge keys (<<) have no JSON form",
		"? [a, b]\n: c\n": "a key must be a plain name, not a list",
		"a: .inf\n":       ".inf has no JSON form",
		"a: 1\na: 2\n":    `"a" is set twice (first on line 1)`,
	} {
		var n yaml.Node
		if err := yaml.Unmarshal([]byte(yamlDoc), &n); err != nil {
			continue // not YAML at all: the caller's parse refuses it
		}
		if got, err := Convert(&n); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Convert(%q) = %s, %v; want an error saying %q", yamlDoc, got, err, want)
		}
	}
}
