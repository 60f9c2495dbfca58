package client

import (
	"errors"
	"strings"
)

// ErrInvalidKey is returned, before anything is sent, for a key given with
// WithKey that no gateway could accept: one with a character outside
// printable ASCII.
var ErrInvalidKey = errors.New("idemgate: invalid idempotency key")

// headerKey is how key travels in the Idempotency-Key header: as is when
// it is a bare token, else as an RFC 8941 sf-string, the one form every
// gateway key syntax accepts for it.
func headerKey(key string) (string, error) {
	if key == "" {
		return "", ErrInvalidKey
	}
	bare := true
	for i := 0; i < len(key); i++ {
		switch c := key[i]; {
		case c < 0x20 || c > 0x7e:
			return "", ErrInvalidKey
		case c == ' ' || c == ',' || c == '"':
			bare = false
		}
	}
	if bare {
		return key, nil
	}
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(key); i++ {
		if key[i] == '"' || key[i] == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(key[i])
	}
	b.WriteByte('"')
	return b.String(), nil
}
