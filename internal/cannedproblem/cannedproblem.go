package cannedproblem

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"strconv"

	"github.com/idemgate/idemgate/middleware/requestid"
)

// serverHeaders is the header block net/http writes after the status line
// of an answer it makes itself, and before the body.
const serverHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

// Listener wraps ln so that its connections rewrite the server's own
// answers into problem documents whose type is base plus the slug
// "bad-request".
func Listener(ln net.Listener, base string) net.Listener { return &listener{Listener: ln, base: base} }

type listener struct {
	net.Listener
	base string
}

func (l *listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &conn{Conn: c, base: l.base}, nil
}

type conn struct {
	net.Conn
	base string
}

// CloseWrite lets the server half-close after a 431, as it does on a bare
// TCP connection.
func (c *conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

func (c *conn) Write(p []byte) (int, error) {
	if answer, ok := rewrite(p, c.base); ok {
		if _, err := c.Conn.Write(answer); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	return c.Conn.Write(p)
}

// rewrite returns the problem+json answer for p when p is a whole answer
// the server wrote by itself.
func rewrite(p []byte, base string) ([]byte, bool) {
	const proto = "HTTP/1.1 "
	if !bytes.HasPrefix(p, []byte(proto)) {
		return nil, false
	}
	end := bytes.Index(p, []byte("\r\n"))
	if end < len(proto)+3 || !bytes.HasPrefix(p[end:], []byte(serverHeaders)) {
		return nil, false
	}
	code, err := strconv.Atoi(string(p[len(proto) : len(proto)+3]))
	if err != nil || code < 400 || code > 599 {
		return nil, false
	}
	id := requestid.New()
	body, err := json.Marshal(map[string]any{
		"type":       base + "bad-request",
		"title":      "Bad request",
		"status":     code,
		"detail":     detail(code, string(p[end+len(serverHeaders):])),
		"instance":   requestid.URN(id),
		"request_id": id,
		"retryable":  false,
	})
	if err != nil {
		return nil, false
	}
	var b bytes.Buffer
	b.WriteString(proto + strconv.Itoa(code) + " " + http.StatusText(code) + "\r\n")
	b.WriteString("Content-Type: application/problem+json\r\nConnection: close\r\n")
	b.WriteString("X-Request-Id: " + id + "\r\n")
	b.WriteString("Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n")
	b.Write(body)
	return b.Bytes(), true
}

// detail says what was wrong, from the server's own text.
func detail(code int, text string) string {
	switch code {
	case http.StatusRequestHeaderFieldsTooLarge:
		return "the request's headers are larger than the gateway accepts"
	case http.StatusNotImplemented:
		return "the request's transfer encoding is not supported"
	}
	// "400 Bad Request" or "400 Bad Request: missing required Host header"
	if _, reason, ok := bytes.Cut([]byte(text), []byte(": ")); ok {
		return "the request is malformed: " + string(reason)
	}
	return "the request is malformed"
}
