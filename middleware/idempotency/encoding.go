package idempotency

import (
	"compress/gzip"
	"compress/zlib"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"

	"github.com/idemgate/idemgate/problem"
)

// The content codings Config.DecodeContentEncodings may name. deflate is
// the zlib format, as HTTP defines it (RFC 9110, section 8.4.1.2).
const (
	ContentEncodingGzip    = "gzip"
	ContentEncodingDeflate = "deflate"
)

// decoder opens the decoded stream of an encoded body.
type decoder func(io.Reader) (io.Reader, error)

var decoders = map[string]decoder{
	ContentEncodingGzip:    func(r io.Reader) (io.Reader, error) { return gzip.NewReader(r) },
	ContentEncodingDeflate: func(r io.Reader) (io.Reader, error) { return zlib.NewReader(r) },
}

// decoding returns the decoder of a request's Content-Encoding: nil for
// none or identity, and a 415 refusal, with Accept-Encoding naming what
// the route decodes, for a coding it does not (or more than one).
func (m *Middleware) decoding(h http.Header) (decoder, error) {
	var codings []string
	for _, v := range h.Values("Content-Encoding") {
		for c := range strings.SplitSeq(v, ",") {
			if c = strings.ToLower(strings.TrimSpace(c)); c != "" && c != "identity" {
				codings = append(codings, c)
			}
		}
	}
	if len(codings) == 0 {
		return nil, nil
	}
	if c := codings[0]; len(codings) == 1 && slices.Contains(m.cfg.DecodeContentEncodings, c) {
		return decoders[c], nil
	}
	accepted := strings.Join(append([]string{"identity"}, m.cfg.DecodeContentEncodings...), ", ")
	return nil, &problem.Error{Err: ErrEncodingRefused, AcceptEncoding: accepted,
		Detail: fmt.Sprintf("this route does not accept a request body with Content-Encoding %s; send it as %s", strings.Join(codings, ", "), accepted)}
}

// badEncoding refuses a body that does not decode as its Content-Encoding
// says.
func badEncoding(err error) error {
	return &problem.Error{Err: ErrEncodingRefused, Detail: "the request body does not decode as its Content-Encoding says", Cause: err}
}

// errOverLimit ends the read of a body past the limit.
var errOverLimit = errors.New("over the limit")

// bounded reads at most n bytes of r and fails with errOverLimit past
// them: an encoded body and what it inflates to are never read further
// than MaxRequestBytes, however well they compress.
type bounded struct {
	r io.Reader
	n int64
}

func (b *bounded) Read(p []byte) (int, error) {
	if b.n < 0 {
		return 0, errOverLimit
	}
	if int64(len(p)) > b.n+1 {
		p = p[:b.n+1]
	}
	n, err := b.r.Read(p)
	b.n -= int64(n)
	if b.n < 0 {
		return n, errOverLimit
	}
	return n, err
}
