package flowlimit

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"
)

// Client is the part of a Redis client the limiter uses. A *redis.Client,
// a *redis.ClusterClient and every redis.UniversalClient satisfy it.
type Client interface {
	redis.Scripter
	Pipeline() redis.Pipeliner
}

var _ Client = (redis.UniversalClient)(nil)

// Rule is one limit as one take counts it: the limit's name and settings,
// and the key value its budget is counted per.
type Rule struct {
	// Name is the limit's name; Value the key value (a tenant, a partner
	// account), of any length: a long one is named by its ShortValue.
	// Both together name the budget.
	Name, Value string
	// Concurrency is how many holders the budget allows at once; 0 means
	// no concurrency limit.
	Concurrency int
	// Rate starts per Period; 0 means no rate limit. Starts are paced as
	// Rate per Period and 50ms, so that a receiver counting starts per
	// Period sees at most Rate (Burst aside) when their trip to it varies
	// by less than 50ms. A Period under 500ms gets a tenth of it instead.
	Rate   int
	Period time.Duration
	// Burst is how many starts may come at once above the even pace of
	// one every Period/Rate. 0 means 1.
	Burst int
}

// interval is the pace of starts: Period/Rate, spread over a Period
// longer by its receiverMargin.
func (r Rule) interval() time.Duration {
	if r.Rate <= 0 || r.Period <= 0 {
		return 0
	}
	return (r.Period + receiverMargin(r.Period)) / time.Duration(r.Rate)
}

// receiverMargin is how much later than Period/Rate apart a rule paces
// its starts, over one Period: 50ms, or a tenth of a Period shorter than
// half a second. Starts leave Redis exactly paced and reach the receiver
// after a trip that varies (a PostgreSQL take, the call itself); with the
// margin, a receiver counting starts per Period sees at most Rate when
// that trip varies by less than it.
func receiverMargin(period time.Duration) time.Duration {
	return min(50*time.Millisecond, period/10)
}

func (r Rule) burst() int { return max(r.Burst, 1) }

// Reasons a take is refused, as RefusedError.Reason says.
const (
	// ReasonConcurrency: every slot of the budget is held.
	ReasonConcurrency = "concurrency"
	// ReasonRate: the budget's starts are spent until RetryAfter.
	ReasonRate = "rate"
)

// RefusedError says which rule refused a take and when to try again.
type RefusedError struct {
	// Name and Value name the budget that refused; Value is the rule's
	// ShortValue.
	Name, Value string
	// Reason is ReasonConcurrency or ReasonRate.
	Reason string
	// RetryAfter is when the rate admits a start again (exact: GCRA knows
	// it); 0 for full slots, which free when a holder ends.
	RetryAfter time.Duration
}

func (e *RefusedError) Error() string {
	if e.Reason == ReasonRate {
		return fmt.Sprintf("limit %s %q: rate spent, next start in %s", e.Name, e.Value, e.RetryAfter)
	}
	return fmt.Sprintf("limit %s %q: every slot is held", e.Name, e.Value)
}

// Options configure a Limiter. The zero value is usable.
type Options struct {
	// Prefix is prepended to every key. Default "".
	Prefix string
	// RecentValues is how many key values per limit the index of recently
	// used values keeps (Usage reads it). Default 1000.
	RecentValues int
}

// DefaultRecentValues is Options.RecentValues' default.
const DefaultRecentValues = 1000

// recentTTL lets the index of a limit nobody uses any more go.
const recentTTL = 24 * time.Hour

// Limiter takes and gives back the budgets of limits in Redis, shared by
// every process that uses the same Redis and prefix.
type Limiter struct {
	client  Client
	prefix  string
	recent  int
	cluster bool
	scripts scripts
}

// New returns a Limiter on client.
func New(client Client, opts Options) *Limiter {
	if opts.RecentValues <= 0 {
		opts.RecentValues = DefaultRecentValues
	}
	_, cluster := client.(*redis.ClusterClient)
	return &Limiter{client: client, prefix: opts.Prefix, recent: opts.RecentValues, cluster: cluster, scripts: newScripts()}
}

// Keys returns the Redis keys of one budget: its slots (a sorted set of
// holders scored by the end of their lease) and its rate state (GCRA's
// theoretical arrival time, in µs of Redis time). They share the hash tag
// {<name>:<value>}, so Redis Cluster keeps them in one slot and one
// script can take both. A value over MaxValueBytes is named by its
// ShortValue.
func (l *Limiter) Keys(name, value string) (slots, tat string) {
	return l.keys(name, ShortValue(value))
}

// keys is Keys of a value ShortValue has already shortened.
func (l *Limiter) keys(name, short string) (slots, tat string) {
	base := l.prefix + "idemgate:limit:{" + name + ":" + short + "}:"
	return base + "slots", base + "tat"
}

// MaxValueBytes is the longest key value that names its budget as it is.
const MaxValueBytes = 64

// ShortValue is how a key value names its budget: the value itself when
// it has at most MaxValueBytes bytes; otherwise its first MaxValueBytes
// bytes (fewer where that would split a character), "~" and 32 hex digits
// of its SHA-256, 97 bytes at most. A value is in Redis key names, the
// index of recent values, refusals and the attempt ledger; a payload
// chooses it, so its size is bounded here. A short form is longer than
// MaxValueBytes, so it never names the budget of a value kept whole.
func ShortValue(value string) string {
	if len(value) <= MaxValueBytes {
		return value
	}
	cut := MaxValueBytes
	for cut > 0 && !utf8.RuneStart(value[cut]) {
		cut--
	}
	sum := sha256.Sum256([]byte(value))
	return value[:cut] + "~" + hex.EncodeToString(sum[:16])
}

// recentKey is the index of a limit's recently used key values, scored by
// the last take in Unix ms. It has a hash tag of its own.
func (l *Limiter) recentKey(name string) string {
	return l.prefix + "idemgate:limit:{" + name + "}:values"
}

// Holder returns a holder name for one attempt: who, then random bytes, so
// two attempts of one job never share a slot.
func Holder(who string) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return who + "#" + hex.EncodeToString(b[:])
}

// Take takes every rule for holder, all or none: a slot leased for lease
// from each rule with a concurrency, and a start from each rule with a
// rate. It returns the Hold to renew and release, or a *RefusedError
// naming the first rule that refused (nothing is then taken), or the
// error of reaching Redis.
//
// On one Redis (or Sentinel) every rule is checked and taken by one script
// call, in one round trip together with the index of recent values. On
// Redis Cluster each rule's keys are in their own slot, so the rules are
// taken one script call each, all sent in one pipeline; when one refuses,
// those the others took are given back by a second call.
func (l *Limiter) Take(ctx context.Context, holder string, lease time.Duration, rules []Rule) (*Hold, error) {
	if len(rules) == 0 {
		return &Hold{l: l, holder: holder}, nil
	}
	if lease < time.Millisecond {
		return nil, errors.New("limit: lease below 1ms")
	}
	rules = slices.Clone(rules)
	for i := range rules {
		rules[i].Value = ShortValue(rules[i].Value)
	}
	groups := [][]Rule{rules}
	if l.cluster && len(rules) > 1 {
		groups = make([][]Rule, len(rules))
		for i, r := range rules {
			groups[i] = []Rule{r}
		}
	}
	results, err := l.runTake(ctx, holder, lease, groups)
	if err != nil {
		return nil, err
	}
	var refused *RefusedError
	var taken [][]Rule
	for g, res := range results {
		if res.refused == nil {
			taken = append(taken, groups[g])
		} else if refused == nil {
			refused = res.refused
		}
	}
	if refused != nil {
		if len(taken) > 0 {
			if err := l.undo(ctx, holder, taken); err != nil {
				return nil, errors.Join(refused, err)
			}
		}
		return nil, refused
	}
	h := &Hold{l: l, holder: holder}
	for _, r := range rules {
		if r.Concurrency > 0 {
			slots, _ := l.keys(r.Name, r.Value)
			h.slots = append(h.slots, slots)
		}
	}
	return h, nil
}

type takeResult struct{ refused *RefusedError }

// runTake sends one take script per group and the index updates in one
// pipeline. A script Redis does not know yet is loaded, and the pipeline
// sent again once.
func (l *Limiter) runTake(ctx context.Context, holder string, lease time.Duration, groups [][]Rule) ([]takeResult, error) {
	for try := 0; ; try++ {
		pipe := l.client.Pipeline()
		cmds := make([]*redis.Cmd, len(groups))
		for g, rules := range groups {
			keys, args := l.takeArgs(holder, lease, rules)
			cmds[g] = l.scripts.take.EvalSha(ctx, pipe, keys, args...)
		}
		nowMs := time.Now().UnixMilli()
		for _, r := range uniqueNames(groups) {
			idx := l.recentKey(r)
			for _, rules := range groups {
				for _, rule := range rules {
					if rule.Name == r {
						pipe.ZAdd(ctx, idx, redis.Z{Score: float64(nowMs), Member: rule.Value})
					}
				}
			}
			pipe.ZRemRangeByRank(ctx, idx, 0, int64(-l.recent-1))
			pipe.Expire(ctx, idx, recentTTL)
		}
		_, err := pipe.Exec(ctx)
		if err != nil && try == 0 && noScript(cmds) {
			if lerr := l.scripts.take.Load(ctx, l.client).Err(); lerr != nil {
				return nil, fmt.Errorf("limit: load the take script: %w", lerr)
			}
			continue
		}
		out := make([]takeResult, len(groups))
		for g, cmd := range cmds {
			vals, err := cmd.Int64Slice()
			if err != nil {
				return nil, fmt.Errorf("limit: take: %w", err)
			}
			if len(vals) != 3 {
				return nil, fmt.Errorf("limit: take: unexpected answer %v", vals)
			}
			if vals[0] == 0 {
				continue
			}
			r := groups[g][vals[0]-1]
			ref := &RefusedError{Name: r.Name, Value: r.Value, Reason: ReasonConcurrency}
			if vals[1] == 2 {
				ref.Reason = ReasonRate
				ref.RetryAfter = time.Duration(vals[2]) * time.Microsecond
			}
			out[g].refused = ref
		}
		if err != nil {
			// A failed index update alone: the take itself stands.
			if _, ok := errors.AsType[redis.Error](err); !ok {
				return nil, fmt.Errorf("limit: take: %w", err)
			}
		}
		return out, nil
	}
}

func (l *Limiter) takeArgs(holder string, lease time.Duration, rules []Rule) ([]string, []any) {
	keys := make([]string, 0, 2*len(rules))
	args := make([]any, 0, 3+3*len(rules))
	args = append(args, holder, lease.Microseconds(), len(rules))
	for _, r := range rules {
		slots, tat := l.keys(r.Name, r.Value)
		keys = append(keys, slots, tat)
		args = append(args, r.Concurrency, r.interval().Microseconds(), r.burst())
	}
	return keys, args
}

func (l *Limiter) undo(ctx context.Context, holder string, groups [][]Rule) error {
	pipe := l.client.Pipeline()
	for _, rules := range groups {
		keys := make([]string, 0, 2*len(rules))
		args := []any{holder, len(rules)}
		for _, r := range rules {
			slots, tat := l.keys(r.Name, r.Value)
			keys = append(keys, slots, tat)
			args = append(args, r.Concurrency, r.interval().Microseconds())
		}
		l.scripts.undo.Eval(ctx, pipe, keys, args...)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("limit: give back a partial take: %w", err)
	}
	return nil
}

func uniqueNames(groups [][]Rule) []string {
	var names []string
	for _, rules := range groups {
		for _, r := range rules {
			if !contains(names, r.Name) {
				names = append(names, r.Name)
			}
		}
	}
	return names
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func noScript(cmds []*redis.Cmd) bool {
	for _, c := range cmds {
		if err := c.Err(); err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
			return true
		}
	}
	return false
}

// Hold is what one Take took: the slots to renew while the attempt runs
// and to give back when it ends. Starts taken from a rate are spent and
// are not given back. A Hold with no slots (rate limits only) does
// nothing.
type Hold struct {
	l      *Limiter
	holder string
	slots  []string
}

// Holder is the holder the slots are held as.
func (h *Hold) Holder() string { return h.holder }

// Slots reports whether the hold has any slot to renew or release.
func (h *Hold) Slots() bool { return len(h.slots) > 0 }

// Renew moves the end of every slot's lease to lease from now, where the
// slot is still the holder's. It returns how many slots it renewed: fewer
// than held means a lease ran out (a stalled process) and someone else may
// have the slot now.
func (h *Hold) Renew(ctx context.Context, lease time.Duration) (int, error) {
	if len(h.slots) == 0 {
		return 0, nil
	}
	if !h.l.cluster || len(h.slots) == 1 {
		n, err := h.l.scripts.renew.Run(ctx, h.l.client, h.slots, h.holder, lease.Microseconds()).Int()
		if err != nil {
			return 0, fmt.Errorf("limit: renew: %w", err)
		}
		return n, nil
	}
	pipe := h.l.client.Pipeline()
	cmds := make([]*redis.Cmd, len(h.slots))
	for i, s := range h.slots {
		cmds[i] = h.l.scripts.renew.Eval(ctx, pipe, []string{s}, h.holder, lease.Microseconds())
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, fmt.Errorf("limit: renew: %w", err)
	}
	n := 0
	for _, c := range cmds {
		k, _ := c.Int()
		n += k
	}
	return n, nil
}

// Release gives the slots back: one pipeline of ZREMs, one round trip
// (ZREM needs no script: leaving a set one is not in changes nothing). A
// slot whose release fails frees at its lease's end.
func (h *Hold) Release(ctx context.Context) error {
	if len(h.slots) == 0 {
		return nil
	}
	pipe := h.l.client.Pipeline()
	h.ReleaseIn(ctx, pipe)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("limit: release: %w", err)
	}
	h.Freed()
	return nil
}

// ReleaseIn queues the slots' release on pipe, a pipeline of the same
// Redis, so that it shares a round trip with other writes: the worker
// sends it with the release of the job's lock. The slots are free once
// pipe has run; call Freed then.
func (h *Hold) ReleaseIn(ctx context.Context, pipe redis.Pipeliner) {
	for _, s := range h.slots {
		pipe.ZRem(ctx, s, h.holder)
	}
}
