package gateway

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/problem"
)

// The request headers that schedule a job on an enqueue route; they
// exclude each other. Both are part of the request's fingerprint.
const (
	// HeaderDelay asks the job to run this many seconds after it is
	// recorded: a non-negative integer.
	HeaderDelay = "Idemgate-Delay"
	// HeaderNotBefore asks the job to run at an RFC 3339 date-time with
	// an offset, from 1970 to 9999 in UTC; a time already past runs it at
	// once.
	HeaderNotBefore = "Idemgate-Not-Before"
)

// The years a not_before may fall in, in UTC. Before 1970 a time is no
// schedule anyone means, and before 1678 its nanoseconds since 1970 no
// longer fit an int64 (time.UnixNano wraps: 1600 became 2184); after 9999
// it has no RFC 3339 form to store or show.
const (
	minNotBeforeYear = 1970
	maxNotBeforeYear = 9999
)

// ErrInvalidSchedule refuses an enqueue request whose schedule headers
// cannot be read: both given, a repeated one, a delay that is not a
// non-negative integer, a time that is not RFC 3339 or outside the years
// 1970 to 9999.
var ErrInvalidSchedule = errors.New("invalid schedule")

// scheduleHeaders are the headers an enqueue route's fingerprint covers
// when a request carries them: the schedule is part of the request, so
// the same key with another schedule, or without one, is a different
// request (422 key reused), and a plain retry with the same one replays.
// A request without them fingerprints as it did before schedules existed,
// so the records stored before an upgrade still replay.
func scheduleHeaders(own []string) []string {
	return append(append([]string(nil), own...), HeaderDelay, HeaderNotBefore)
}

// maxDelaySeconds keeps a delay's seconds within what a time.Duration holds.
const maxDelaySeconds = int64(1<<63-1) / int64(time.Second)

// parseSchedule reads the schedule headers of r: the zero Schedule when
// there are none (the job's own delay applies). The error is a
// *problem.Error wrapping ErrInvalidSchedule.
func parseSchedule(h http.Header) (job.Schedule, error) {
	delays, times := h.Values(HeaderDelay), h.Values(HeaderNotBefore)
	invalid := func(format string, args ...any) (job.Schedule, error) {
		return job.Schedule{}, &problem.Error{Err: ErrInvalidSchedule, Detail: fmt.Sprintf(format, args...)}
	}
	switch {
	case len(delays) > 0 && len(times) > 0:
		return invalid("%s and %s exclude each other; send one", HeaderDelay, HeaderNotBefore)
	case len(delays) > 1 || len(times) > 1:
		return invalid("send the schedule header once")
	case len(delays) == 1:
		v := strings.TrimSpace(delays[0])
		n, err := strconv.ParseInt(v, 10, 64)
		if errors.Is(err, strconv.ErrRange) && n > 0 {
			err = nil // digits beyond int64: far beyond any max_delay
		}
		if err != nil || n < 0 || strings.HasPrefix(v, "+") {
			return invalid("%s must be a non-negative whole number of seconds, not %q", HeaderDelay, delays[0])
		}
		if n > maxDelaySeconds {
			n = maxDelaySeconds // far beyond any max_delay: refused as out of range
		}
		return job.ScheduleAfter(time.Duration(n) * time.Second), nil
	case len(times) == 1:
		v := strings.TrimSpace(times[0])
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return invalid("%s must be an RFC 3339 date-time with an offset in the years %d to %d (UTC), like 2026-01-02T08:00:00Z, not %q",
				HeaderNotBefore, minNotBeforeYear, maxNotBeforeYear, times[0])
		}
		if y := t.UTC().Year(); y < minNotBeforeYear || y > maxNotBeforeYear {
			return invalid("%s must fall in the years %d to %d (UTC), not %q", HeaderNotBefore, minNotBeforeYear, maxNotBeforeYear, times[0])
		}
		return job.ScheduleAt(t), nil
	}
	return job.Schedule{}, nil
}
