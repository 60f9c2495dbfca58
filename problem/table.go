package problem

import (
	"errors"
	"net/http"
)

// Type is one problem type (RFC 9457) and the error it answers: one row
// of a Table.
type Type struct {
	// Err is the sentinel the type answers. An error matches it when
	// errors.Is(err, Err).
	Err error
	// Status is the HTTP status of the answer.
	Status int
	// Slug ends the type's URI, after the Writer's Base.
	Slug string
	// Title is the document's title, the same for every occurrence.
	Title string
	// Pending marks a problem whose original request still runs, so that
	// the same request sent again gets its answer once it ends. A
	// pending problem is retryable whatever its status.
	Pending bool
	// DocURL is the page that documents the problem, written as the
	// document's documentation member and its Link rel="describedby".
	// Empty means none.
	DocURL string
}

// Retryable reports whether the same request, with the same key, may
// simply be sent again. It does when the status means "not processed, try
// again" (NotProcessed) or the problem is Pending. Any other problem needs
// the request, the key or an operator to change first. Sent again as it
// is, it gets the same answer.
func (p Type) Retryable() bool {
	return NotProcessed(p.Status) || p.Pending
}

// Documentation returns DocURL: the document's documentation member and
// its Link rel="describedby". It is "" for a problem no page documents.
func (p Type) Documentation() string { return p.DocURL }

// NotProcessed reports whether an answer with this status means "not
// processed, try again": 408, 425, 429, 502, 503, 504.
func NotProcessed(status int) bool {
	switch status {
	case http.StatusRequestTimeout, http.StatusTooEarly, http.StatusTooManyRequests,
		http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// Table maps errors to problem types. The first row whose Err the error
// matches (errors.Is) answers it.
type Table []Type

// Lookup returns the row that answers err. ok is false when none does.
func (t Table) Lookup(err error) (p Type, ok bool) {
	for _, row := range t {
		if errors.Is(err, row.Err) {
			return row, true
		}
	}
	return Type{}, false
}

// internalError answers an error no row of a Table matches.
var internalError = Type{Status: http.StatusInternalServerError, Slug: "internal", Title: "Internal error"}
