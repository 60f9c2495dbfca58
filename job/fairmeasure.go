package job

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// What a pool dispatched is counted by its dispatch script, per pool
// shard and minute. Design: docs/design/fairness.md#measured-share-and-dwell

// fairMeasuredFor is how long a minute's counts are kept.
const fairMeasuredFor = 65 * time.Minute

// fairDwellBuckets are the upper bounds of the dwell buckets a pool
// counts, the same as the idemgate_fair_dwell_seconds histogram's.
var fairDwellBuckets = []time.Duration{
	5 * time.Millisecond, 10 * time.Millisecond, 25 * time.Millisecond, 50 * time.Millisecond,
	100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond, time.Second,
	2500 * time.Millisecond, 5 * time.Second, 10 * time.Second, 30 * time.Second,
	time.Minute, 5 * time.Minute, 30 * time.Minute,
}

// fairDwellArg is fairDwellBuckets in milliseconds, joined by commas: the
// dispatch script's argument.
var fairDwellArg = func() string {
	ms := make([]string, len(fairDwellBuckets))
	for i, b := range fairDwellBuckets {
		ms[i] = strconv.FormatInt(b.Milliseconds(), 10)
	}
	return strings.Join(ms, ",")
}()

// measuredKey is the measured hash of minute (unix time / 60) under base.
func measuredKey(base string, minute int64) string {
	return base + "measured:" + strconv.FormatInt(minute, 10)
}

// FairMeasure is what a pool dispatched of one tenant's jobs over a
// window.
type FairMeasure struct {
	Tenant string
	// Dispatched is how many of its jobs the pool moved into flight,
	// retries and re-entries included.
	Dispatched int64
	// Share is Dispatched over the pool's dispatches, in percent.
	Share float64
	// Dwelt is how many of them were first dispatches, whose dwell is
	// counted.
	Dwelt int64
	// DwellMean is their mean wait from submit to dispatch. 0 when Dwelt
	// is 0.
	DwellMean time.Duration
	// DwellP99 is an upper bound of the 99th percentile of that wait: the
	// top of the bucket it falls in. 0 when Dwelt is 0. The special value
	// -1 says it is above the last bucket, 30 minutes.
	DwellP99 time.Duration
}

// Measured reads what pool dispatched over the last window, by tenant,
// sorted by name. It reads whole minutes, so it covers up to a minute
// more than window. Counts are kept for an hour.
func (f *Fairness) Measured(ctx context.Context, pool string, window time.Duration) ([]FairMeasure, error) {
	p, ok := f.pools[pool]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrNoPool, pool)
	}
	now := f.now()
	from, to := now.Add(-window).Unix()/60, now.Unix()/60
	type counts struct {
		n, dwelt, sum int64
		le            map[string]int64
	}
	by := map[string]*counts{}
	for shard := range f.shards() {
		keys := f.keys(p, shard)
		base := strings.TrimSuffix(keys[0], "jobs")
		pipe := f.rdb.Pipeline()
		var cmds []*redis.MapStringStringCmd
		for m := from; m <= to; m++ {
			cmds = append(cmds, pipe.HGetAll(ctx, measuredKey(base, m)))
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, fmt.Errorf("job: fairness pool %s: measured: %w", pool, err)
		}
		for _, cmd := range cmds {
			for field, v := range cmd.Val() {
				x, _ := strconv.ParseInt(v, 10, 64)
				tenant, what := field, ""
				if i := strings.LastIndex(field, ":le:"); i >= 0 {
					tenant, what = field[:i], field[i+1:]
				} else if i := strings.LastIndexByte(field, ':'); i >= 0 {
					tenant, what = field[:i], field[i+1:]
				}
				c := by[tenant]
				if c == nil {
					c = &counts{le: map[string]int64{}}
					by[tenant] = c
				}
				switch {
				case what == "n":
					c.n += x
				case what == "dwelt":
					c.dwelt += x
				case what == "dwell_ms_sum":
					c.sum += x
				case strings.HasPrefix(what, "le:"):
					c.le[what[3:]] += x
				}
			}
		}
	}
	var total int64
	for _, c := range by {
		total += c.n
	}
	out := make([]FairMeasure, 0, len(by))
	for _, t := range slices.Sorted(maps.Keys(by)) {
		c := by[t]
		m := FairMeasure{Tenant: t, Dispatched: c.n, Dwelt: c.dwelt}
		if total > 0 {
			m.Share = 100 * float64(c.n) / float64(total)
		}
		if c.dwelt > 0 {
			m.DwellMean = time.Duration(c.sum/c.dwelt) * time.Millisecond
			m.DwellP99 = dwellQuantile(c.le, c.dwelt, 0.99)
		}
		out = append(out, m)
	}
	return out, nil
}

// dwellQuantile is the top of the bucket of le (counts by bucket, of n
// in all) that holds the q quantile; -1 above the last bucket.
func dwellQuantile(le map[string]int64, n int64, q float64) time.Duration {
	var seen int64
	for _, b := range fairDwellBuckets {
		seen += le[strconv.FormatInt(b.Milliseconds(), 10)]
		if float64(seen) >= q*float64(n) {
			return b
		}
	}
	return -1
}
