package requestid

import "testing"

// TestUUID5 checks the derivation against RFC 9562's name-based UUIDs:
// the DNS name space's "python.org" (a vector every implementation
// shares), and the package's own name space, the UUIDv5 of its URL.
func TestUUID5(t *testing.T) {
	t.Parallel()
	const nsDNS = "\x6b\xa7\xb8\x10\x9d\xad\x11\xd1\x80\xb4\x00\xc0\x4f\xd4\x30\xc8"
	const nsURL = "\x6b\xa7\xb8\x11\x9d\xad\x11\xd1\x80\xb4\x00\xc0\x4f\xd4\x30\xc8"
	if got := format(uuid5(nsDNS, "python.org")); got != "886313e1-3b8a-5372-9b90-0c9aee199e5d" {
		t.Errorf("uuid5(DNS, python.org) = %s", got)
	}
	if got, want := uuid5(nsURL, "https://idemgate.dev/request-id"), namespace; string(got[:]) != want {
		t.Errorf("the name space is %s, want the UUIDv5 of its URL, %s", format([16]byte([]byte(want))), format(got))
	}
}
