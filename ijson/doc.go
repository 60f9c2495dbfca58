// Package ijson is I-JSON (RFC 7493) and its canonical form: Check says
// whether a JSON document has one meaning for every reader (UTF-8 only,
// surrogate escapes only in pairs, each member name once per object), and
// WriteCanonical writes a decoded document with sorted keys, no white space
// and numbers as written. The idempotency middleware fingerprints a JSON
// body by that form, and package job compares payloads by it, so "the same
// body" and "the same payload" mean one thing. Standard library only, so
// that both can import it.
//
//	if err := ijson.Check(body); err != nil {
//		var e *ijson.Error // wraps ijson.ErrNotIJSON: where, and why
//	}
package ijson
