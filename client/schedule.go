package client

import (
	"strconv"
	"time"
)

// WithDelay schedules the job SubmitJob submits to run d after the gateway
// records it (the Idemgate-Delay header, in whole seconds, d rounded up;
// a negative d is 0, which runs it at once even when its task has a
// default delay). The job document says scheduled, with not_before, until
// then. The header is part of the request, so every attempt of the call
// sends the same one; a later call with the same WithKey and another
// schedule is refused as a reused key.
func WithDelay(d time.Duration) CallOption {
	secs := int64(0)
	if d > 0 {
		secs = int64((d + time.Second - 1) / time.Second)
	}
	return WithHeader("Idemgate-Delay", strconv.FormatInt(secs, 10))
}

// WithNotBefore schedules the job SubmitJob submits to run at t (the
// Idemgate-Not-Before header, RFC 3339); a t already past runs it at
// once. It excludes WithDelay.
func WithNotBefore(t time.Time) CallOption {
	return WithHeader("Idemgate-Not-Before", t.Format(time.RFC3339Nano))
}
