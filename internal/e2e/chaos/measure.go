package chaos

import "time"

// measureFailover fills the columns the failover and partition scenarios
// added: answers forgotten and run again, jobs delivered twice, the
// errors the clients saw and when, and how long the service took to come
// back. jobs says whether the load enqueued jobs.
func (r *Row) measureFailover(res *loadResult, applied map[string][]Application, faultStart time.Time, jobs bool) {
	var first, last time.Time
	r.ClientErrors, r.ErrorsBeforeFault, r.ErrorSpanMS = 0, 0, 0
	for _, a := range res.attempts {
		if a.status != 0 && a.status < 500 {
			continue
		}
		r.ClientErrors++
		if !faultStart.IsZero() && a.at.Before(faultStart) {
			r.ErrorsBeforeFault++
		}
		if first.IsZero() || a.at.Before(first) {
			first = a.at
		}
		if a.at.After(last) {
			last = a.at
		}
	}
	if r.ClientErrors > 0 {
		r.ErrorSpanMS = last.Sub(first).Milliseconds()
	}
	if !faultStart.IsZero() {
		if ms, ok := recovery(res.attempts, faultStart); ok {
			r.RecoveryMS = &ms
		}
	}
	if applied == nil {
		return
	}
	var rerunAfterAnswer, double int
	var takeover int64 = -1
	for _, k := range res.keys {
		apps := applied[k.key]
		if k.job {
			// A job is delivered after its 202: a second delivery is
			// counted below.
			if len(apps) > 1 {
				double++
			}
			if !faultStart.IsZero() && len(apps) > 1 && apps[0].At.Before(faultStart) {
				for _, a := range apps[1:] {
					if !a.At.Before(faultStart) {
						takeover = max(takeover, a.At.Sub(faultStart).Milliseconds())
						break
					}
				}
			}
			continue
		}
		var answered time.Time
		for _, a := range k.answers {
			if a.status >= 200 && a.status < 300 && (answered.IsZero() || a.at.Before(answered)) {
				answered = a.at
			}
		}
		if !answered.IsZero() {
			for _, a := range apps {
				if a.At.After(answered) {
					rerunAfterAnswer++
					break
				}
			}
		}
	}
	if !onlyJobs(res) {
		r.AnsweredThenRerun = &rerunAfterAnswer
	}
	if jobs {
		r.DoubleDeliveries = &double
		if takeover >= 0 {
			r.TakeoverMS = &takeover
		}
	}
}

// onlyJobs reports whether every key of the load was a job.
func onlyJobs(res *loadResult) bool {
	for _, k := range res.keys {
		if !k.job {
			return false
		}
	}
	return true
}

// recovery is the time from the first failed exchange after the fault
// started to the first 2xx answer to a request sent after that failure:
// how long clients that noticed the fault waited to be served again. No
// failure after the fault: 0.
func recovery(calls []call, faultStart time.Time) (int64, bool) {
	var failed time.Time
	for _, c := range calls {
		if (c.status == 0 || c.status >= 500) && !c.at.Before(faultStart) && (failed.IsZero() || c.at.Before(failed)) {
			failed = c.at
		}
	}
	if failed.IsZero() {
		return 0, true
	}
	var served time.Time
	for _, c := range calls {
		if c.status >= 200 && c.status < 300 && !c.sent.Before(failed) && (served.IsZero() || c.at.Before(served)) {
			served = c.at
		}
	}
	if served.IsZero() {
		return 0, false
	}
	return served.Sub(failed).Milliseconds(), true
}
