package idempotency

import (
	"errors"
	"fmt"
	"strings"

	"github.com/idemgate/idemgate/problem"
)

// HeaderKey is the request header that carries the idempotency key.
const HeaderKey = "Idempotency-Key"

// KeySyntax selects which forms of the Idempotency-Key header are accepted.
type KeySyntax string

const (
	// KeyStrict accepts only an RFC 8941 sf-string: "abc".
	KeyStrict KeySyntax = "strict"
	// KeyCompat also accepts a bare key of printable ASCII without spaces,
	// commas or quotes (the form Stripe popularised). A value that starts
	// with a quote is always parsed as an sf-string.
	KeyCompat KeySyntax = "compat"
)

// ParseKey returns the key carried by the header lines in values. It
// returns ErrKeyMissing when there is no header, and an error wrapping
// ErrKeyInvalid, with a detail a client can act on, for a repeated header,
// a list, a malformed value or a key outside 1..maxLen characters. The
// quoted and bare forms of one key ("abc" and abc) parse to the same key.
func ParseKey(values []string, syntax KeySyntax, maxLen int) (string, error) {
	switch len(values) {
	case 0:
		return "", ErrKeyMissing
	case 1:
	default:
		return "", invalidKey("the Idempotency-Key header must be sent once, not %d times", len(values))
	}
	v := strings.Trim(values[0], " \t")
	if v == "" {
		return "", emptyKey("the Idempotency-Key header is empty")
	}
	var key string
	if v[0] == '"' {
		k, rest, err := parseSFString(v)
		if err != nil {
			return "", err
		}
		rest = strings.TrimLeft(rest, " \t")
		switch {
		case rest == "":
		case rest[0] == ',':
			return "", invalidKey("the Idempotency-Key header must hold one key, not a list")
		case rest[0] == ';':
			return "", invalidKey("the Idempotency-Key header must not carry parameters")
		default:
			return "", invalidKey("unexpected characters after the closing quote of the Idempotency-Key")
		}
		key = k
	} else {
		if syntax == KeyStrict {
			return "", invalidKey(`the Idempotency-Key must be a quoted string, for example "8e03978e-40d5-43e8-bc93-6894a57f9324"`)
		}
		for i := 0; i < len(v); i++ {
			c := v[i]
			switch {
			case c == ',':
				return "", invalidKey("the Idempotency-Key header must hold one key, not a list")
			case c == '"' || c <= 0x20 || c >= 0x7f:
				return "", invalidKey("the Idempotency-Key may hold only printable ASCII without spaces, commas or quotes (character %d is %q)", i+1, c)
			}
		}
		key = v
	}
	if len(key) == 0 {
		return "", emptyKey("the Idempotency-Key is empty")
	}
	if len(key) > maxLen {
		return "", invalidKey("the Idempotency-Key is %d characters long; at most %d are allowed", len(key), maxLen)
	}
	return key, nil
}

// parseSFString parses an RFC 8941 sf-string at the start of v and returns
// its value and what follows the closing quote.
func parseSFString(v string) (string, string, error) {
	var b strings.Builder
	for i := 1; i < len(v); i++ {
		c := v[i]
		switch {
		case c == '\\':
			i++
			if i == len(v) || (v[i] != '"' && v[i] != '\\') {
				return "", "", invalidKey(`in a quoted Idempotency-Key a backslash may only escape " or \`)
			}
			b.WriteByte(v[i])
		case c == '"':
			return b.String(), v[i+1:], nil
		case c < 0x20 || c > 0x7e:
			return "", "", invalidKey("the Idempotency-Key may hold only printable ASCII (character %d is %q)", i+1, c)
		default:
			b.WriteByte(c)
		}
	}
	return "", "", invalidKey("the quoted Idempotency-Key has no closing quote")
}

func invalidKey(format string, args ...any) error {
	return &problem.Error{Err: ErrKeyInvalid, Detail: fmt.Sprintf(format, args...)}
}

// errKeyEmpty marks an invalid key that was sent empty: its problem
// names the key as sent, the empty string, as the other key problems
// name theirs.
var errKeyEmpty = errors.New("the key is empty")

func emptyKey(detail string) error {
	return &problem.Error{Err: ErrKeyInvalid, Detail: detail, Cause: errKeyEmpty}
}
