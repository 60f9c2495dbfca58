// Package cannedproblem turns the few answers net/http's server writes by
// itself, before any handler sees a request — 431 for headers over the
// limit, 400 for a malformed request, 501 for an unknown transfer
// encoding — from text/plain into application/problem+json, so that every
// error a client of the gateway meets reads the same way.
//
// The server writes each of them in one Write on the connection, with a
// fixed header block no handler's answer has (a handler's always carries
// Date), so a connection that recognises that block can replace the
// answer whole:
//
//	ln = cannedproblem.Listener(ln, "https://idemgate.dev/problems/")
//	srv.Serve(ln)
//
// It works for plain HTTP/1 only: under TLS the bytes are encrypted below
// where it can see them (and net/http needs the *tls.Conn itself), so a
// TLS listener keeps the server's text/plain answers.
package cannedproblem
