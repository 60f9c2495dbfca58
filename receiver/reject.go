package receiver

import "errors"

// ErrRejected is what every error made by Reject matches with errors.Is.
var ErrRejected = errors.New("receiver: delivery rejected")

// Reject marks err, returned by a business function, as a permanent
// refusal: Handler answers 422 with err's message, and the sender
// dead-letters the job instead of retrying it. Use it for a payload that
// will never apply (an unknown order, a quantity out of range); any other
// error is answered 500 and retried. Reject(nil) is nil.
func Reject(err error) error {
	if err == nil {
		return nil
	}
	return &rejectError{err: err}
}

type rejectError struct{ err error }

func (e *rejectError) Error() string        { return e.err.Error() }
func (e *rejectError) Unwrap() error        { return e.err }
func (e *rejectError) Is(target error) bool { return target == ErrRejected }
