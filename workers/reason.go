package workers

import (
	"errors"

	"github.com/idemgate/idemgate/workers/execution"
)

// A job's tenant reads its error in the job document (GET /v1/jobs/{id});
// operators read the attempt ledger (idemgate explain, the admin API) and
// the worker log. The two are kept apart: an error's full text may name an
// internal host, a credential in a URL or the start of a receiver's answer,
// so the status report (StatusFunc's lastErr) carries only publicReason's
// stable, class-level text, and the full text goes to the execution state,
// the ledger and the log.

// Public reasons of a Go handler's errors. Its own text may hold anything
// (a partner's answer, a connection string), so a tenant reads only the
// class the framework acts on.
const (
	reasonFailed      = "the attempt failed"
	reasonPermanent   = "the job was refused (permanent error)"
	reasonUnavailable = "a service the job needs was unavailable"
	reasonNoVerdict   = "no attempt reached a verdict"
	reasonCancelled   = "cancelled"
	reasonNoAnswer    = "no answer: the receiver may have applied it"
)

// publicError is an error that says what a tenant may read of it.
type publicError interface {
	error
	publicReason() string
}

// reasoned is err with the reason a tenant reads instead of its text.
type reasoned struct {
	reason string
	err    error
	// unanswered: the request may have reached the receiver, and no
	// answer came back (a timeout, a connection lost).
	unanswered bool
}

// unanswered reports whether err is a delivery that got no answer.
func unanswered(err error) bool {
	re, ok := errors.AsType[*reasoned](err)
	return ok && re.unanswered
}

// ledgerText is err as the attempt ledger and the execution state record
// it: a delivery that got no answer is marked so, since the receiver may
// have applied it whatever the attempt's outcome (execution.Unanswered).
func ledgerText(err error) string {
	if unanswered(err) {
		return execution.NoAnswer + ": " + err.Error()
	}
	return err.Error()
}

func (e *reasoned) Error() string        { return e.err.Error() }
func (e *reasoned) Unwrap() error        { return e.err }
func (e *reasoned) publicReason() string { return e.reason }

// publicReason is what a job's tenant reads of err: the reason of the
// outermost error that gives one, else the class of err.
func publicReason(err error) string {
	if pe, ok := errors.AsType[publicError](err); ok {
		return pe.publicReason()
	}
	switch {
	case IsPermanent(err):
		return reasonPermanent
	case IsUnavailable(err):
		return reasonUnavailable
	}
	return reasonFailed
}
