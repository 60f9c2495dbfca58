package idempotencytest

import (
	"errors"
	"fmt"

	"github.com/idemgate/idemgate/lincheck"
	"github.com/idemgate/idemgate/middleware/idempotency"
)

// call is one Store call of a history: the StoreModel's input.
type call struct {
	op          string // claim, renew, complete, release, unknown, get; expire is the test's mark
	owner       string
	fingerprint string // claim
	body        string // complete: the response's body, its identity
}

// result is what a Store call returned: the StoreModel's output. err is
// "" for nil, "not owner" or "not found"; any other error fails the run
// before the check.
type result struct {
	err         string
	claimed     bool
	takeOver    bool
	state       idempotency.State
	token       int64
	owner       string
	fingerprint string
	body        string
}

// record is one scope's state in StoreModel; state "" is no record.
type record struct {
	state       idempotency.State
	fingerprint string
	owner       string // the in-flight claim's owner
	token       int64  // the last token issued
	body        string // the completed response's body
	// expired: the in-flight claim's lease has passed. The test marks it
	// (an expire call) only once every lease on the scope has passed on
	// any clock, since the model has no clock of its own.
	expired bool
}

// StoreModel is a record's state machine as the idempotency.Store
// interface documents it, for one scope whose records never reach their
// retention:
//
//   - Claim on no record succeeds, not as a take-over, with a token of at
//     least 1 and below 2^53. Of concurrent claims at most one succeeds.
//   - Claim with the record's fingerprint succeeds as a take-over, with a
//     token above every earlier one, when the record was released or its
//     lease expired; otherwise, and always with another fingerprint, it
//     fails and returns the record as it is (state, token, response).
//   - Renew, Complete, Release and MarkUnknown succeed only for the
//     in-flight claim's owner, and fail with ErrNotOwner for anyone else.
//     The owner of a claim whose lease expired may be refused
//     (ErrNotOwner) or not, until another claim takes it over.
//   - Complete stores the response; Release and MarkUnknown end the claim
//     as released and unknown. None of them changes the token.
//   - Get returns ErrNotFound before the first claim, then the record:
//     state, token, fingerprint, the owner while in flight, the response
//     once completed.
func StoreModel() lincheck.Model {
	return lincheck.Model{
		Name:     "store model",
		Init:     func() any { return record{} },
		Step:     func(state, input, output any) (bool, any) { return step(state.(record), input.(call), output.(result)) },
		Describe: describeCall,
		// A refused call, a failed claim and a read leave the record as it
		// was; the search for a short violation may drop them.
		ReadOnly: func(input, output any) bool {
			in, out := input.(call), output.(result)
			return out.err != "" || in.op == "get" || in.op == "claim" && !out.claimed
		},
	}
}

func step(s record, in call, out result) (bool, record) {
	switch in.op {
	case "expire":
		if s.state == idempotency.StateInFlight {
			s.expired = true
		}
		return true, s
	case "claim":
		free := s.state == idempotency.StateReleased || s.state == idempotency.StateInFlight && s.expired
		switch {
		case s.state == "":
			if out.err != "" || !out.claimed || out.takeOver || out.token < 1 || out.token >= maxToken {
				return false, s
			}
		case in.fingerprint == s.fingerprint && free:
			if out.err != "" || !out.claimed || !out.takeOver || out.token <= s.token || out.token >= maxToken {
				return false, s
			}
		default:
			ok := out.err == "" && !out.claimed && out.state == s.state && out.token == s.token &&
				(s.state != idempotency.StateCompleted || out.body == s.body)
			return ok, s
		}
		return true, record{state: idempotency.StateInFlight, fingerprint: in.fingerprint, owner: in.owner, token: out.token}
	case "renew", "complete", "release", "unknown":
		owns := s.state == idempotency.StateInFlight && s.owner == in.owner
		if out.err == "not owner" {
			return !owns || s.expired, s
		}
		if out.err != "" || !owns {
			return false, s
		}
		next := s
		switch in.op {
		case "renew":
			next.expired = false // renewed with a lease that outlasts the run
		case "complete":
			next = record{state: idempotency.StateCompleted, fingerprint: s.fingerprint, token: s.token, body: in.body}
		case "release":
			next = record{state: idempotency.StateReleased, fingerprint: s.fingerprint, token: s.token}
		case "unknown":
			next = record{state: idempotency.StateUnknown, fingerprint: s.fingerprint, token: s.token}
		}
		return true, next
	case "get":
		if s.state == "" {
			return out.err == "not found", s
		}
		owner := ""
		if s.state == idempotency.StateInFlight {
			owner = s.owner
		}
		ok := out.err == "" && out.state == s.state && out.token == s.token && out.fingerprint == s.fingerprint &&
			out.owner == owner && out.body == s.body
		return ok, s
	}
	return false, s
}

// outcome turns a Store call's return into the model's output; ok is
// false for an error the model has no place for.
func outcome(rec *idempotency.Record, claim *idempotency.ClaimResult, err error) (result, bool) {
	switch {
	case errors.Is(err, idempotency.ErrNotOwner):
		return result{err: "not owner"}, true
	case errors.Is(err, idempotency.ErrNotFound):
		return result{err: "not found"}, true
	case err != nil:
		return result{err: err.Error()}, false
	}
	var r result
	if claim != nil {
		r.claimed, r.takeOver = claim.Claimed, claim.TakeOver
		rec = &claim.Record
	}
	if rec != nil {
		r.state, r.token, r.owner, r.fingerprint = rec.State, rec.FencingToken, rec.Owner, rec.Fingerprint
		if rec.Response != nil {
			r.body = string(rec.Response.Body)
		}
	}
	return r, true
}

func describeCall(input, output any) string {
	in, out := input.(call), output.(result)
	who := ""
	if in.owner != "" {
		who = " by " + short(in.owner)
	}
	var got string
	switch {
	case in.op == "expire":
		return "(every lease so far has expired)"
	case out.err != "":
		got = out.err
	case in.op == "claim":
		got = fmt.Sprintf("claimed=%v take-over=%v %s token %d", out.claimed, out.takeOver, out.state, out.token)
	case in.op == "get":
		got = fmt.Sprintf("%s token %d owner %q", out.state, out.token, short(out.owner))
		if out.body != "" {
			got += fmt.Sprintf(" body %q", out.body)
		}
	default:
		got = "ok"
	}
	arg := ""
	switch in.op {
	case "claim":
		arg = "(" + in.fingerprint + ")"
	case "complete":
		arg = fmt.Sprintf("(body %q)", in.body)
	}
	return fmt.Sprintf("%s%s%s → %s", in.op, arg, who, got)
}

// short is an owner token cut for reading.
func short(owner string) string { return owner[:min(len(owner), 6)] }
