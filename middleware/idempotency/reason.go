package idempotency

import (
	"context"
	"fmt"
)

type releaseReasonKey struct{}

// WithReleaseReason returns ctx carrying why a claim is being released or
// held as unknown, for a store that keeps a claim ledger (pgstore).
func WithReleaseReason(ctx context.Context, reason string) context.Context {
	return context.WithValue(ctx, releaseReasonKey{}, reason)
}

// ReleaseReason is the reason WithReleaseReason put in ctx, or "".
func ReleaseReason(ctx context.Context) string {
	s, _ := ctx.Value(releaseReasonKey{}).(string)
	return s
}

// releaseReason says why an attempt's claim is released or held.
func releaseReason(a *Attempt, what Stored, status int) string {
	switch {
	case what == StoredCompleted:
		return ""
	case a.mark.Load() == markAmbiguous:
		return "ambiguous: the request was sent and no answer came"
	case a.mark.Load() == markNotProcessed:
		return "not processed: the upstream could not be reached"
	case status != 0 && ReleasesKey(status):
		return fmt.Sprintf("not processed: the upstream answered %d", status)
	}
	return "the handler ended without an answer"
}
