package idempotency

import (
	"bytes"
	"net/http"
	"strings"
)

// recorder buffers a handler's response so the record can be stored before
// the client sees it. Two things make it send early: a body over the stored
// limit (beforeSend stores the record without its body first) and Flush
// (streaming: the body is sent as it comes and stored at the end if it
// fits).
type recorder struct {
	rw    http.ResponseWriter
	limit int64
	// header is the handler's own: what it sets is what is stored, apart
	// from what the layers outside the middleware set on rw (a request id,
	// rate limit headers), which belong to this response only.
	header http.Header

	status  int
	body    bytes.Buffer
	omitted bool // the body outgrew the limit; it is not all in body
	sent    bool // status and buffered body have gone to rw
	discard bool // the response will not be sent: drop what comes
	// gate's beforeSend runs once, when the body outgrows the limit before
	// the handler returned; it stores the record and reports whether the
	// response may go to the client. When it may not (the claim was taken
	// over, or the store could not take the record in time), the rest of
	// the response is dropped and the middleware answers instead.
	gate sendGate
}

// sendGate decides whether a response may go out before the handler
// returned (execution implements it).
type sendGate interface {
	beforeSend(status int) bool
}

var _ http.ResponseWriter = (*recorder)(nil)

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(code int) {
	if code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols {
		// Informational responses pass straight through with the headers
		// set for them, which then leave the final response.
		h := r.rw.Header()
		for k, vs := range r.header {
			h[k] = vs
		}
		r.rw.WriteHeader(code)
		for k := range r.header {
			h.Del(k)
		}
		return
	}
	if r.status != 0 {
		return
	}
	r.status = code
}

func (r *recorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.WriteHeader(http.StatusOK)
	}
	if r.discard {
		return len(p), nil
	}
	if r.sent {
		r.capture(p)
		return r.rw.Write(p)
	}
	if int64(r.body.Len()+len(p)) <= r.limit {
		return r.body.Write(p)
	}
	// Over the limit while still buffering: store without the body, then
	// hand the client everything.
	r.omitted = true
	if r.gate != nil && !r.gate.beforeSend(r.status) {
		r.discard = true
		r.body.Reset()
		return len(p), nil
	}
	if err := r.send(); err != nil {
		return 0, err
	}
	r.body.Reset()
	return r.rw.Write(p)
}

func (r *recorder) capture(p []byte) {
	if r.omitted {
		return
	}
	if int64(r.body.Len()+len(p)) > r.limit {
		r.omitted = true
		r.body.Reset()
		return
	}
	r.body.Write(p)
}

// send writes the status and the buffered body to the client.
func (r *recorder) send() error {
	if r.sent {
		return nil
	}
	r.sent = true
	if r.status == 0 {
		r.status = http.StatusOK
	}
	h := r.rw.Header()
	trailers := namedIn(r.header, "Trailer")
	for k, vs := range r.header {
		if k == "Trailer" || trailers[k] || strings.HasPrefix(k, http.TrailerPrefix) {
			continue // see storableHeader
		}
		h[k] = vs
	}
	r.rw.WriteHeader(r.status)
	if r.body.Len() == 0 {
		return nil
	}
	_, err := r.rw.Write(r.body.Bytes())
	return err
}

// Flush switches to streaming: what is buffered goes out now.
func (r *recorder) Flush() {
	_ = r.FlushError()
}

// FlushError is what http.ResponseController calls.
func (r *recorder) FlushError() error {
	if r.status == 0 {
		r.WriteHeader(http.StatusOK)
	}
	if r.discard {
		return nil
	}
	if err := r.send(); err != nil {
		return err
	}
	return http.NewResponseController(r.rw).Flush()
}

// Unwrap lets http.ResponseController reach the real writer.
func (r *recorder) Unwrap() http.ResponseWriter { return r.rw }

// response is what to store for the captured response.
func (r *recorder) response() Response {
	resp := Response{Status: r.status, Header: storableHeader(r.header), BodyOmitted: r.omitted}
	if resp.Status == 0 {
		resp.Status = http.StatusOK
	}
	if !r.omitted && r.body.Len() > 0 {
		resp.Body = bytes.Clone(r.body.Bytes())
	}
	return resp
}

// storableHeader drops what must not be replayed: hop-by-hop headers (and
// those Connection names), Set-Cookie and Set-Cookie2 (a session meant for
// the first client must not reach whoever retries with its key), and
// Content-Length, which the replay recomputes. Trailers (announced in
// Trailer, or set with http.TrailerPrefix) are neither stored nor sent on
// the first answer: a replay could only send them as headers, and the
// first answer and its replays must carry the same fields.
func storableHeader(h http.Header) http.Header {
	out := make(http.Header, len(h))
	drop := namedIn(h, "Connection")
	for k := range namedIn(h, "Trailer") {
		if drop == nil {
			drop = map[string]bool{}
		}
		drop[k] = true
	}
	// The stored values share one backing array, each header's slice
	// capped so that an append to one cannot reach the next.
	n := 0
	for _, vs := range h {
		n += len(vs)
	}
	all := make([]string, 0, n)
	for k, vs := range h {
		if drop[k] || notStored(k) || strings.HasPrefix(k, http.TrailerPrefix) {
			continue
		}
		if len(vs) == 0 {
			out[k] = nil
			continue
		}
		i := len(all)
		all = append(all, vs...)
		out[k] = all[i:len(all):len(all)]
	}
	return out
}

// namedIn returns the header names listed in h's field (Connection,
// Trailer), canonical; nil when it lists none.
func namedIn(h http.Header, field string) map[string]bool {
	var names map[string]bool
	for _, v := range h[field] {
		for _, name := range strings.Split(v, ",") {
			if name = strings.TrimSpace(name); name != "" {
				if names == nil {
					names = map[string]bool{}
				}
				names[http.CanonicalHeaderKey(name)] = true
			}
		}
	}
	return names
}

// notStored reports whether a header is never stored for replay.
func notStored(canonical string) bool {
	switch canonical {
	case "Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
		"Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
		"Set-Cookie", "Set-Cookie2", "Content-Length", HeaderReplayed, HeaderReplayedX, HeaderKeyExpires:
		return true
	}
	return false
}
