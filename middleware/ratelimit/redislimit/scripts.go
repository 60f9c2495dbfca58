package redislimit

import "github.com/redis/go-redis/v9"

// Every operation is one Lua script on one key (KEYS[1], the bucket), so it
// is atomic and runs on the node that owns the key's slot. Times are
// microseconds of the server's clock (TIME); a double holds them exactly
// for centuries. Numbers are written with %d so they are stored as plain
// integers.
//
// A bucket's hash fields:
//
//	start   start of the current interval (µs)
//	avail   tokens left in it
//	max iv  the key's own limit, set by Set only; otherwise ARGV[1] and
//	        ARGV[2] (the store's tokens and interval µs) apply
//
// The key expires at start + iv + IdleTTL (ARGV[3], ms), refreshed by every
// write, so a bucket disappears once it has sat idle for a whole interval.
// A missing bucket is a full one that starts now.
const prelude = `
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local function int(n) return string.format('%d', n) end

-- load returns the bucket's limit, interval, interval start and available
-- tokens as of now, and whether they differ from what is stored.
local function load(key, now)
  local max, iv = tonumber(ARGV[1]), tonumber(ARGV[2])
  local h = redis.call('HMGET', key, 'start', 'avail', 'max', 'iv')
  if h[3] and h[4] then max, iv = tonumber(h[3]), tonumber(h[4]) end
  if not h[1] then return max, iv, now, max, true end
  local start, avail = tonumber(h[1]), tonumber(h[2])
  if now < start then
    -- The server clock went back (a failover to a node whose clock is
    -- behind): start the interval again rather than wait out the gap.
    return max, iv, now, avail, true
  end
  if now >= start + iv then
    return max, iv, start + math.floor((now - start) / iv) * iv, max, true
  end
  return max, iv, start, avail, false
end

local function save(key, start, avail, iv)
  redis.call('HSET', key, 'start', int(start), 'avail', int(avail))
  redis.call('PEXPIREAT', key, int(math.ceil((start + iv) / 1000) + tonumber(ARGV[3])))
end
`

// takeScript returns {limit, remaining, reset µs, ok 1|0}. A refusal that
// changes nothing writes nothing, so a client hammering past its budget
// costs reads only.
const takeScript = prelude + `
local key = KEYS[1]
local now = now_us()
local max, iv, start, avail, changed = load(key, now)
local ok = 0
if avail > 0 then
  avail = avail - 1
  ok = 1
end
if ok == 1 or changed then save(key, start, avail, iv) end
return {max, avail, start + iv, ok}
`

// takeNScript: ARGV[4] tokens to take, all or none. Returns what
// takeScript does.
const takeNScript = prelude + `
local key = KEYS[1]
local n = tonumber(ARGV[4])
local now = now_us()
local max, iv, start, avail, changed = load(key, now)
local ok = 0
if avail >= n then
  avail = avail - n
  ok = 1
end
if ok == 1 or changed then save(key, start, avail, iv) end
return {max, avail, start + iv, ok}
`

// getScript returns {limit, remaining}, or {0, 0} for a missing key (as
// ratelimit.Memory does for a key it has not seen). It writes nothing.
const getScript = prelude + `
local key = KEYS[1]
if redis.call('EXISTS', key) == 0 then return {0, 0} end
local max, iv, start, avail = load(key, now_us())
return {max, avail}
`

// setScript: ARGV[4] tokens, ARGV[5] interval µs. Replaces the bucket with a
// full one on that limit, starting now.
const setScript = prelude + `
local key = KEYS[1]
local max, iv = tonumber(ARGV[4]), tonumber(ARGV[5])
redis.call('DEL', key)
redis.call('HSET', key, 'max', int(max), 'iv', int(iv))
save(key, now_us(), max, iv)
return 1
`

// burstScript: ARGV[4] tokens to add to the current interval.
const burstScript = prelude + `
local key = KEYS[1]
local max, iv, start, avail = load(key, now_us())
save(key, start, avail + tonumber(ARGV[4]), iv)
return 1
`

type scripts struct {
	take, takeN, get, set, burst *redis.Script
}

// newScripts wraps the scripts; Run sends EVALSHA and falls back to EVAL
// when the node does not have the script cached yet.
func newScripts() scripts {
	return scripts{
		take:  redis.NewScript(takeScript),
		takeN: redis.NewScript(takeNScript),
		get:   redis.NewScript(getScript),
		set:   redis.NewScript(setScript),
		burst: redis.NewScript(burstScript),
	}
}
