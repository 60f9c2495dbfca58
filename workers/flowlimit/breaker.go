package flowlimit

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// failSource counts one failed attempt of a budget toward its breaker.
// The count's window starts at the first failure and lasts ARGV[1] ms; a
// count that reaches ARGV[2] is deleted and returned (the breaker opens),
// any other returns 0.
const failSource = `
local n = redis.call('INCR', KEYS[1])
if n == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
if n >= tonumber(ARGV[2]) then
  redis.call('DEL', KEYS[1])
  return n
end
return 0
`

var failScript = redis.NewScript(failSource)

// failuresKey is the count of a budget's consecutive failures. It shares
// the budget's hash tag.
func (l *Limiter) failuresKey(name, value string) string {
	return l.prefix + "idemgate:limit:{" + name + ":" + ShortValue(value) + "}:failures"
}

// CountFailureIn queues on pipe one failed attempt of the budget (name,
// value) toward its breaker: n in a row within window open it. Once pipe
// has run, the command's Int is the count that opened it, or 0.
func (l *Limiter) CountFailureIn(ctx context.Context, pipe redis.Pipeliner, name, value string, n int, window time.Duration) *redis.Cmd {
	return failScript.Eval(ctx, pipe, []string{l.failuresKey(name, value)}, window.Milliseconds(), n)
}

// ResetFailuresIn queues on pipe a success of the budget: its count of
// consecutive failures starts again.
func (l *Limiter) ResetFailuresIn(ctx context.Context, pipe redis.Pipeliner, name, value string) {
	pipe.Del(ctx, l.failuresKey(name, value))
}
