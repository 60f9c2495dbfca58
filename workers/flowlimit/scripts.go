package flowlimit

import "github.com/redis/go-redis/v9"

// takeSource checks every rule it is given, then takes every one, or none.
// Time is Redis's own (TIME), in microseconds, so workers whose clocks
// disagree still share one pace.
//
// KEYS: per rule i, its slots (a sorted set of holders scored by the end
// of their lease) at 2i-1 and its theoretical arrival time (GCRA's TAT)
// at 2i.
// ARGV: holder, lease in µs, the number of rules, then per rule its
// concurrency (0: none), its interval in µs (period/rate; 0: no rate) and
// its burst.
//
// It returns {0, 0, 0} when every rule was taken, or {i, reason, wait} for
// the first rule that refused: reason 1 the slots are full, 2 the rate is
// spent, and wait the µs until the rate admits a start again (GCRA's
// retry-after; 0 for full slots, which free when a holder ends).
//
// Expired leases are removed before counting, so a slot whose holder died
// frees once its lease runs out. A holder already in the set (the same
// attempt taking again) keeps its slot. A rule's keys expire by themselves
// once nothing holds them: the slots a while after the longest lease, the
// TAT when it is in the past, where it means the same as no TAT.
const takeSource = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local holder = ARGV[1]
local lease = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
local tats = {}
for i = 1, n do
  local slots, tatkey = KEYS[2*i-1], KEYS[2*i]
  local conc = tonumber(ARGV[3*i+1])
  local interval = tonumber(ARGV[3*i+2])
  local burst = tonumber(ARGV[3*i+3])
  if conc > 0 then
    redis.call('ZREMRANGEBYSCORE', slots, '-inf', now)
    if not redis.call('ZSCORE', slots, holder) and redis.call('ZCARD', slots) >= conc then
      return {i, 1, 0}
    end
  end
  if interval > 0 then
    local tat = tonumber(redis.call('GET', tatkey) or '0')
    if tat < now then tat = now end
    local allowed = tat + interval - burst * interval
    if allowed > now then
      return {i, 2, allowed - now}
    end
    tats[i] = tat + interval
  end
end
for i = 1, n do
  local slots, tatkey = KEYS[2*i-1], KEYS[2*i]
  if tonumber(ARGV[3*i+1]) > 0 then
    redis.call('ZADD', slots, now + lease, holder)
    redis.call('PEXPIRE', slots, math.floor(2 * lease / 1000) + 1000)
  end
  if tats[i] then
    redis.call('SET', tatkey, tats[i], 'PX', math.floor((tats[i] - now) / 1000) + 1)
  end
end
return {0, 0, 0}
`

// undoSource gives back what one take of the rules in KEYS (as takeSource
// reads them) took, when another rule of the same take refused after it
// (Redis Cluster, where the rules' keys are in different slots and are
// taken one call each): the holder leaves the slots, and the TAT steps
// back one interval, never below now. GCRA's state is a sum of intervals,
// so stepping back one is exactly the take undone, whatever others took
// since.
//
// ARGV: holder, the number of rules, then per rule its concurrency and its
// interval in µs.
const undoSource = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local holder = ARGV[1]
local n = tonumber(ARGV[2])
for i = 1, n do
  local slots, tatkey = KEYS[2*i-1], KEYS[2*i]
  if tonumber(ARGV[2*i+1]) > 0 then
    redis.call('ZREM', slots, holder)
  end
  local interval = tonumber(ARGV[2*i+2])
  local tat = tonumber(redis.call('GET', tatkey) or '0')
  if interval > 0 and tat > now then
    tat = tat - interval
    if tat > now then
      redis.call('SET', tatkey, tat, 'PX', math.floor((tat - now) / 1000) + 1)
    else
      redis.call('DEL', tatkey)
    end
  end
end
return 0
`

// renewSource moves the end of holder's lease in each slots set of KEYS to
// now + ARGV[2] µs, only where holder still has a slot: a lease that ran
// out is not taken again behind the back of whoever took the slot since.
// It returns how many slots it renewed.
const renewSource = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local lease = tonumber(ARGV[2])
local renewed = 0
for i = 1, #KEYS do
  local score = redis.call('ZSCORE', KEYS[i], ARGV[1])
  if score and tonumber(score) > now then
    redis.call('ZADD', KEYS[i], 'XX', now + lease, ARGV[1])
    redis.call('PEXPIRE', KEYS[i], math.floor(2 * lease / 1000) + 1000)
    renewed = renewed + 1
  end
end
return renewed
`

type scripts struct {
	take, undo, renew *redis.Script
}

func newScripts() scripts {
	return scripts{
		take:  redis.NewScript(takeSource),
		undo:  redis.NewScript(undoSource),
		renew: redis.NewScript(renewSource),
	}
}
