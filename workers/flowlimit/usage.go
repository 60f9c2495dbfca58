package flowlimit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Usage is one key value of a limit as Redis holds it now.
type Usage struct {
	Value string
	// Holders are the holders of a slot whose lease has not run out.
	Holders []string
	// Backlog is how far the rate's theoretical arrival time is ahead of
	// now: Backlog/interval starts are spent ahead of the even pace, and a
	// start is refused while Backlog exceeds (burst-1)·interval. 0 when
	// the rate is idle or the limit has none.
	Backlog time.Duration
	// LastUsed is the last take of the value, as the index of recent
	// values knows it.
	LastUsed time.Time
}

// BusiestWindow is how many of the most recently used values Busiest
// ranks for each value it is asked for.
const BusiestWindow = 4

// MaxBusiestRead bounds the values one Busiest reads, whatever it is
// asked for.
const MaxBusiestRead = 1000

// Busiest returns up to n of the name's recently used key values, busiest
// first: most holders, then the longest rate backlog, then the most
// recently used. It ranks the BusiestWindow·n most recently used values
// (a value holding a slot or a backlog was taken lately), at most
// MaxBusiestRead and what the index keeps (Options.RecentValues), so what
// it reads grows with n, not with the index. It reads the index and each
// of those values' keys without SCAN: two round trips. A value is its
// ShortValue.
func (l *Limiter) Busiest(ctx context.Context, name string, n int) ([]Usage, error) {
	if n < 1 {
		return nil, nil
	}
	window := min(min(n, MaxBusiestRead)*BusiestWindow, MaxBusiestRead, l.recent)
	pipe := l.client.Pipeline()
	tm := pipe.Time(ctx)
	recent := pipe.ZRevRangeWithScores(ctx, l.recentKey(name), 0, int64(window-1))
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("limit: read the values of %s: %w", name, err)
	}
	now, err := tm.Result()
	if err != nil {
		return nil, fmt.Errorf("limit: time: %w", err)
	}
	nowUs := now.UnixMicro()
	values := recent.Val()
	if len(values) == 0 {
		return nil, nil
	}
	pipe = l.client.Pipeline()
	holders := make([]*redis.StringSliceCmd, len(values))
	tats := make([]*redis.StringCmd, len(values))
	for i, z := range values {
		slots, tat := l.keys(name, z.Member.(string))
		holders[i] = pipe.ZRangeByScore(ctx, slots, &redis.ZRangeBy{Min: "(" + strconv.FormatInt(nowUs, 10), Max: "+inf"})
		tats[i] = pipe.Get(ctx, tat)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("limit: read the values of %s: %w", name, err)
	}
	out := make([]Usage, len(values))
	for i, z := range values {
		u := Usage{Value: z.Member.(string), Holders: holders[i].Val(), LastUsed: time.UnixMilli(int64(z.Score))}
		if tat, err := strconv.ParseInt(tats[i].Val(), 10, 64); err == nil && tat > nowUs {
			u.Backlog = time.Duration(tat-nowUs) * time.Microsecond
		}
		out[i] = u
	}
	slices.SortStableFunc(out, func(a, b Usage) int {
		switch {
		case len(a.Holders) != len(b.Holders):
			return len(b.Holders) - len(a.Holders)
		case a.Backlog != b.Backlog:
			if a.Backlog > b.Backlog {
				return -1
			}
			return 1
		}
		return b.LastUsed.Compare(a.LastUsed)
	})
	return out[:min(n, len(out))], nil
}
