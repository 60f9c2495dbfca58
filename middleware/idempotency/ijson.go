package idempotency

import (
	"github.com/idemgate/idemgate/ijson"

	"github.com/idemgate/idemgate/problem"
)

// OutcomeInvalidBody: a body sent as JSON was refused with 400 before
// anything was claimed (ijson.ErrNotIJSON): it is JSON, but not I-JSON
// (RFC 7493), so it has no single meaning to fingerprint.
const OutcomeInvalidBody Outcome = "invalid_body"

// invalidBody turns a refusal of the fingerprint (an *ijson.Error) into the
// middleware's refusal: 400, with the fault named.
func invalidBody(err error) error {
	return &problem.Error{Err: ijson.ErrNotIJSON, Cause: err,
		Detail: "the body is JSON but not I-JSON (RFC 7493), so its meaning is ambiguous: " + err.Error() +
			"; send UTF-8, each member name once per object, and surrogate escapes only in pairs"}
}
