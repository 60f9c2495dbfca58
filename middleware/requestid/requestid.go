package requestid

import (
	"context"
	"crypto/rand"
	"crypto/sha1"
	"encoding/hex"
	"io"
	"net/http"
	"strings"
	"time"
)

// Header is the request and response header carrying the id.
const Header = "X-Request-Id"

// ContextKey is the context key FromContext reads; its value is the id,
// a string. Middleware stores it with context.WithValue. A server that
// keeps the state of a request in one context value of its own (one
// request copy instead of one per layer) answers this key in its Value
// method instead, with the id Ensure returned.
type ContextKey struct{}

// Middleware sets the request id on the context and the response.
func Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := Ensure(w, r)
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ContextKey{}, id)))
	})
}

// Ensure returns r's id — the client's X-Request-Id when it is sane, a new
// one otherwise, which it then sets on r — and echoes it on w. It is what
// Middleware does before it puts the id on the context.
func Ensure(w http.ResponseWriter, r *http.Request) string {
	id := r.Header.Get(Header)
	if valid(id) {
		w.Header()[Header] = []string{id}
		return id
	}
	id = New()
	// One backing array for both headers; each slice is capped so that an
	// Add on one cannot write into the other.
	vs := []string{id, id}
	r.Header[Header] = vs[0:1:1]
	w.Header()[Header] = vs[1:2:2]
	return id
}

// FromContext returns the request id, or "" outside the middleware.
func FromContext(ctx context.Context) string {
	id, _ := ctx.Value(ContextKey{}).(string)
	return id
}

// New returns a new id: a UUIDv7 (RFC 9562) in its canonical lower-case
// form, so ids sort by creation time and are their own URN.
func New() string {
	var u [16]byte
	_, _ = rand.Read(u[6:])
	ms := uint64(time.Now().UnixMilli())
	for i := range 6 {
		u[i] = byte(ms >> (40 - 8*i))
	}
	u[6] = 0x70 | u[6]&0x0f
	u[8] = 0x80 | u[8]&0x3f
	return format(u)
}

// namespace is the name space of the UUIDs URN derives from ids that are
// not UUIDs: the UUIDv5 of the URL https://idemgate.dev/request-id.
const namespace = "\x06\xd6\x54\xe8\x62\xff\x58\xc4\xa7\x65\xbd\xfb\x3b\xbe\x6e\xdf"

// URN returns the urn:uuid: (RFC 9562) that names the occurrence id
// identifies: the id itself, in lower case, when it is a UUID (every id
// New makes is); otherwise the name-based UUIDv5 of the id, so a client's
// own X-Request-Id always maps to the same URN and a log line's request_id
// finds the problem it answered. An empty id gets a fresh UUID.
func URN(id string) string {
	if id == "" {
		return "urn:uuid:" + New()
	}
	if isUUID(id) {
		return "urn:uuid:" + strings.ToLower(id)
	}
	return "urn:uuid:" + format(uuid5(namespace, id))
}

// uuid5 is the name-based UUID (version 5, SHA-1) of name in the name
// space ns, given as its 16 bytes.
func uuid5(ns, name string) [16]byte {
	h := sha1.New()
	_, _ = io.WriteString(h, ns)
	_, _ = io.WriteString(h, name)
	var u [16]byte
	copy(u[:], h.Sum(nil))
	u[6] = 0x50 | u[6]&0x0f
	u[8] = 0x80 | u[8]&0x3f
	return u
}

// format writes u as 8-4-4-4-12 lower-case hex digits.
func format(u [16]byte) string {
	var b [36]byte
	hex.Encode(b[0:8], u[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], u[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], u[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], u[8:10])
	b[23] = '-'
	hex.Encode(b[24:], u[10:])
	return string(b[:])
}

// isUUID reports whether s is a UUID in the 8-4-4-4-12 hex form.
func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
				return false
			}
		}
	}
	return true
}

// valid accepts ids a client may choose: 1..128 characters of letters,
// digits and -_.:, so a hostile id cannot forge log lines or headers.
func valid(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' || c == ':') {
			return false
		}
	}
	return true
}
