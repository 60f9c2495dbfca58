package idempotency

import "testing"

// FuzzPlainMediaType: the fast path for a media type already in canonical
// form gives what mime.ParseMediaType gives, so fingerprints do not move.
func FuzzPlainMediaType(f *testing.F) {
	for _, ct := range []string{
		"application/json", "application/problem+json", "text/plain", "application/vnd.api+json",
		"Application/JSON", "application/json; charset=utf-8", "application/", "/json", "application",
		"a/b/c", "application/json ", "text/x-c++", "a/b~|`^", "application/json;", "x/y@z",
	} {
		f.Add(ct)
	}
	f.Fuzz(func(t *testing.T, ct string) {
		if ct == "" || !plainMediaType(ct) {
			return
		}
		gotType, gotJSON := canonicalMediaType(ct)
		wantType, wantJSON := parseMediaType(ct)
		if gotType != wantType || gotJSON != wantJSON {
			t.Fatalf("%q: fast path (%q, %v), ParseMediaType (%q, %v)", ct, gotType, gotJSON, wantType, wantJSON)
		}
	})
}
