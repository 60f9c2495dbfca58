package job

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// FlowLimit is one declared flow limit (`limits:` in the configuration): how
// many jobs may run at once, and how many may start per period, for each
// value of a key the jobs that use it render. Jobs share a limit by name:
// shipment.book and shipment.cancel using ship-api with the same key value
// count against the same budget.
type FlowLimit struct {
	// Name is how jobs refer to the limit, [a-z0-9_.:-]+, unique. It is the
	// label of the limit's metrics and the path of its admin endpoint.
	Name string
	// Concurrency is how many attempts may hold a slot at once per key
	// value; 0 means no concurrency limit.
	Concurrency int
	// Rate is how many attempts may start per Period per key value; 0
	// means no rate limit.
	Rate   int
	Period time.Duration
	// Burst is how many of those starts may come at once, above the even
	// pace of one every Period/Rate. Default 1: evenly spaced.
	Burst int
	// PauseAfter is the limit's breaker; nil: none.
	PauseAfter *Breaker
}

// Breaker pauses one key value of a flow limit by itself (`pause_after`
// in the configuration): after Failures consecutive failed attempts
// within Within, the value is paused For, then resumes by itself. A
// success starts the count again.
type Breaker struct {
	Failures int
	Within   time.Duration
	For      time.Duration
}

// DefaultBurst is a rate limit's burst when none is given: starts are
// evenly spaced, one every period/rate, which is what a partner that
// counts requests per second expects.
const DefaultBurst = 1

// Interval is the pace of the rate: one start every Period/Rate. It is 0
// for a limit without a rate.
func (l FlowLimit) Interval() time.Duration {
	if l.Rate <= 0 {
		return 0
	}
	return l.Period / time.Duration(l.Rate)
}

// RateString is the rate as the configuration writes it ("20/1s"), or ""
// for none.
func (l FlowLimit) RateString() string {
	if l.Rate <= 0 {
		return ""
	}
	return strconv.Itoa(l.Rate) + "/" + shortDuration(l.Period)
}

func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2] // 1m0s → 1m
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2] // 1h0m → 1h
	}
	return s
}

// ParseRate reads a rate as "N/duration": "20/1s", "100/1m", "5/500ms". N
// is a positive integer and the duration a positive Go duration; a
// duration without a number ("20/s") means one of its unit.
func ParseRate(s string) (n int, per time.Duration, err error) {
	count, window, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return 0, 0, fmt.Errorf("rate %q is not N/duration, like 20/1s or 100/1m", s)
	}
	n, err = strconv.Atoi(strings.TrimSpace(count))
	if err != nil || n < 1 {
		return 0, 0, fmt.Errorf("rate %q: %q is not a positive whole number of starts", s, count)
	}
	window = strings.TrimSpace(window)
	unit := window
	if unit != "" && (unit[0] < '0' || unit[0] > '9') {
		unit = "1" + unit
	}
	per, err = time.ParseDuration(unit)
	if err != nil || per <= 0 {
		return 0, 0, fmt.Errorf("rate %q: %q is not a positive duration, like 1s or 1m", s, window)
	}
	if per/time.Duration(n) < time.Microsecond {
		return 0, 0, fmt.Errorf("rate %q is above one start per microsecond", s)
	}
	return n, per, nil
}

// FlowLimitUse is one limit a job uses, resolved: the limit's definition and
// the template of the key value its budget is counted per.
type FlowLimitUse struct {
	Limit FlowLimit
	// Key forms the key value from the job: {tenant} is the job's tenant,
	// any other {field} a field its schema requires.
	Key Template
}

// tenantField is the placeholder of a limit key that stands for the job's
// tenant rather than a payload field.
const tenantField = "tenant"

// KeyFields lists the payload fields the key names ({tenant} is not one).
func (u FlowLimitUse) KeyFields() []string {
	var out []string
	for _, f := range u.Key.Fields() {
		if f != tenantField {
			out = append(out, f)
		}
	}
	return out
}

// faults adds the faults of the key value a payload forms: each payload
// field it names must render, and hold no control character. Its length
// is not bounded: a long value is shortened where it names a budget.
func (u FlowLimitUse) faults(data any, faults []FieldError) []FieldError {
	return append(faults, u.Key.keyFaults("flow limit's key ("+u.Limit.Name+")", data, "", 0, true)...)
}

// Value renders the key value of a job of tenant whose payload is data
// (decoded with json.Decoder.UseNumber): {tenant} is tenant, even when the
// payload has a field called tenant; every other field renders as a
// business key's does.
func (u FlowLimitUse) Value(tenant string, data any) (string, error) {
	v, err := renderTenantKey(u.Key, tenant, data)
	if err != nil {
		return "", fmt.Errorf("limit %s: key %s: %w", u.Limit.Name, u.Key, err)
	}
	return v, nil
}
