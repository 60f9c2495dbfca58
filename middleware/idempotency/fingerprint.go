package idempotency

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"

	"github.com/idemgate/idemgate/ijson"
)

// FingerprintInput is what a request's fingerprint covers.
type FingerprintInput struct {
	Method      string
	Route       string
	Path        string
	RawQuery    string
	ContentType string
	Header      http.Header // only the Fingerprinter's headers are read
	Body        []byte
}

// Fingerprinter computes request fingerprints: SHA-256 over the method,
// route, path, canonical query, media type, the configured headers and the
// body. A JSON body is canonicalised first (object keys sorted, white space
// dropped, numbers and strings kept as written), so key order and
// formatting do not make two equal requests differ. With JSONFields (JSON
// Pointers, RFC 6901) only those fields of a JSON body count.
//
// Canonicalising must never make two different documents one: a body sent
// as JSON that is JSON but not I-JSON (RFC 7493) — invalid UTF-8, an
// unpaired surrogate escape, a duplicate member name — has no single
// meaning to canonicalise, and is refused (ijson.ErrNotIJSON). A body sent as
// JSON that is not JSON at all is fingerprinted by its bytes.
type Fingerprinter struct {
	headers []string
	fields  [][]string
	raw     []string
	// ifPresent are FingerprintConfig.HeadersIfPresent, canonical.
	ifPresent []string
}

// NewFingerprinter validates the header names and JSON Pointers.
func NewFingerprinter(headers, jsonFields []string) (*Fingerprinter, error) {
	f := &Fingerprinter{raw: jsonFields}
	for _, h := range headers {
		if h == "" || strings.ContainsAny(h, " \t:") {
			return nil, fmt.Errorf("fingerprint header %q is not a header name", h)
		}
		f.headers = append(f.headers, http.CanonicalHeaderKey(h))
	}
	for _, p := range jsonFields {
		tokens, err := parsePointer(p)
		if err != nil {
			return nil, err
		}
		f.fields = append(f.fields, tokens)
	}
	return f, nil
}

// Fingerprint returns the hex SHA-256 fingerprint of in. The error is a
// *ijson.Error wrapping ijson.ErrNotIJSON when in has a JSON media type and a body
// that is JSON but not I-JSON: such a request must be refused, since its
// fingerprint could not tell it from another request.
func (f *Fingerprinter) Fingerprint(in FingerprintInput) (string, error) {
	sc := scratchPool.Get().(*fingerprintScratch)
	b := sc.pre[:0]
	b = appendField(b, "idemgate-fingerprint-v1")
	b = appendField(b, in.Method)
	b = appendField(b, in.Route)
	b = appendField(b, in.Path)
	b = appendField(b, canonicalQuery(in.RawQuery))
	mediaType, isJSON := canonicalMediaType(in.ContentType)
	b = appendField(b, mediaType)
	for _, name := range f.headers {
		vals := in.Header.Values(name)
		b = appendField(b, name)
		b = appendUvarintField(b, len(vals))
		for _, v := range vals {
			b = appendField(b, strings.TrimSpace(v))
		}
	}
	b, err := f.body(b, in.Body, isJSON, sc)
	// After the body, whose part is self-delimiting: a request that
	// carries none of these headers ends where it always did.
	for _, name := range f.ifPresent {
		if vals := in.Header.Values(name); len(vals) > 0 {
			b = appendField(b, name)
			b = appendUvarintField(b, len(vals))
			for _, v := range vals {
				b = appendField(b, strings.TrimSpace(v))
			}
		}
	}
	sum := sha256.Sum256(b)
	sc.pre = b
	sc.release()
	if err != nil {
		return "", err
	}
	var h [2 * sha256.Size]byte
	hex.Encode(h[:], sum[:])
	return string(h[:]), nil
}

// fingerprintScratch is the reusable memory of one Fingerprint call: the
// hash's preimage, assembled whole so that it is hashed in one pass, and
// the canonical body.
type fingerprintScratch struct {
	pre, body []byte
	canon     ijson.Scratch
}

var scratchPool = sync.Pool{New: func() any { return new(fingerprintScratch) }}

// maxPooledScratch keeps a single huge body from pinning its buffers.
const maxPooledScratch = 256 << 10

func (sc *fingerprintScratch) release() {
	if cap(sc.pre) > maxPooledScratch || cap(sc.body) > maxPooledScratch || sc.canon.Cap() > maxPooledScratch {
		return
	}
	sc.canon.Reset()
	scratchPool.Put(sc)
}

// body appends the body's part of the preimage: a tag ("raw", "json",
// "json-fields") and the bytes it covers.
func (f *Fingerprinter) body(b, body []byte, isJSON bool, sc *fingerprintScratch) ([]byte, error) {
	if !isJSON {
		b = appendField(b, "raw")
		return appendFieldBytes(b, body), nil
	}
	if len(f.fields) == 0 {
		// The fast path covers the common documents; it gives up, without
		// a verdict, on anything unusual. What it takes is I-JSON: ASCII
		// strings without escapes, no duplicate names.
		if canon, ok := ijson.AppendCanonical(sc.body[:0], body, &sc.canon); ok {
			sc.body = canon
			b = appendField(b, "json")
			return appendFieldBytes(b, canon), nil
		}
	}
	doc, err := ijson.Decode(body)
	if err != nil {
		b = appendField(b, "raw")
		return appendFieldBytes(b, body), nil
	}
	// encoding/json keeps the last of two members of one name and turns
	// bad bytes and lone surrogates into U+FFFD: different bodies would
	// decode, and fingerprint, alike.
	if err := ijson.Check(body); err != nil {
		return b, err
	}
	var buf bytes.Buffer
	if len(f.fields) == 0 {
		b = appendField(b, "json")
		ijson.WriteCanonical(&buf, doc)
		return appendFieldBytes(b, buf.Bytes()), nil
	}
	b = appendField(b, "json-fields")
	for i, tokens := range f.fields {
		b = appendField(b, f.raw[i])
		v, found := lookup(doc, tokens)
		if !found {
			b = appendField(b, "absent")
			continue
		}
		buf.Reset()
		ijson.WriteCanonical(&buf, v)
		b = appendFieldBytes(b, buf.Bytes())
	}
	return b, nil
}

// appendField appends a length-prefixed string so that no two sequences
// of fields hash alike ("ab","c" vs "a","bc").
func appendField(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendFieldBytes(b, v []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}

// appendUvarintField appends n in decimal as a field.
func appendUvarintField(b []byte, n int) []byte {
	var d [20]byte
	return appendFieldBytes(b, strconv.AppendInt(d[:0], int64(n), 10))
}

// canonicalQuery sorts the parameters by name, keeping the order of
// repeated values (a=1&a=2 is not a=2&a=1). A query that does not parse is
// used as sent.
func canonicalQuery(raw string) string {
	if raw == "" {
		return ""
	}
	v, err := url.ParseQuery(raw)
	if err != nil {
		return "raw:" + raw
	}
	return v.Encode()
}

// canonicalMediaType lower-cases the media type, sorts its parameters, and
// reports whether it is JSON (application/json or any +json type).
func canonicalMediaType(ct string) (string, bool) {
	if ct == "" {
		return "", false
	}
	if plainMediaType(ct) {
		// What ParseMediaType would return, without its parameter map.
		return ct, ct == "application/json" || strings.HasSuffix(ct, "+json")
	}
	return parseMediaType(ct)
}

// parseMediaType is canonicalMediaType for any content type.
func parseMediaType(ct string) (string, bool) {
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil {
		return "raw:" + ct, false
	}
	isJSON := mt == "application/json" || strings.HasSuffix(mt, "+json")
	if len(params) == 0 {
		return mt, isJSON
	}
	return mime.FormatMediaType(mt, params), isJSON
}

// plainMediaType reports whether ct is a media type already in canonical
// form: type/subtype in lower-case token characters, no parameters, no
// spaces — what nearly every client sends.
func plainMediaType(ct string) bool {
	slash := strings.IndexByte(ct, '/')
	if slash <= 0 || slash == len(ct)-1 {
		return false
	}
	for i := 0; i < len(ct); i++ {
		c := ct[i]
		switch {
		case i == slash:
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// parsePointer splits an RFC 6901 JSON Pointer into unescaped tokens.
func parsePointer(p string) ([]string, error) {
	if p == "" {
		return nil, nil
	}
	if p[0] != '/' {
		return nil, fmt.Errorf("json_fields: %q is not a JSON Pointer (it must start with /)", p)
	}
	parts := strings.Split(p[1:], "/")
	for i, part := range parts {
		for j := 0; j < len(part); j++ {
			if part[j] == '~' && (j+1 == len(part) || (part[j+1] != '0' && part[j+1] != '1')) {
				return nil, fmt.Errorf("json_fields: %q has a ~ not followed by 0 or 1", p)
			}
		}
		parts[i] = strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")
	}
	return parts, nil
}

func lookup(doc any, tokens []string) (any, bool) {
	cur := doc
	for _, tok := range tokens {
		switch t := cur.(type) {
		case map[string]any:
			v, ok := t[tok]
			if !ok {
				return nil, false
			}
			cur = v
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(t) || (len(tok) > 1 && tok[0] == '0') {
				return nil, false
			}
			cur = t[i]
		default:
			return nil, false
		}
	}
	return cur, true
}
