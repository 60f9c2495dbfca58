// Package problem is the one error carrier from a refusal to its answer,
// and the one renderer of that answer as an application/problem+json
// document (RFC 9457). Code that refuses a request returns an *Error: a
// sentinel as its reason, the detail a client may see, and apart from it
// the cause that is only logged. A Table maps sentinels to problem types
// (status, slug, title), and a Writer looks the error up in its Table and
// writes the document. An error no row matches is a 500 whose detail says
// nothing of it.
//
// The idempotency middleware, the rate limiter, the job package and the
// gateway all report through this package, so that one table decides
// every answer and the reference pages are generated from it. It needs
// only the standard library.
//
//	w := problem.Writer{Table: problem.Table{
//		{Err: ErrNotFound, Status: http.StatusNotFound, Slug: "not-found", Title: "Not found"},
//	}}
//	w.Write(rw, r, &problem.Error{Err: ErrNotFound, Detail: "no such job"})
package problem
