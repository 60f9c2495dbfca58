package job

import "github.com/redis/go-redis/v9"

// The pool's scripts. Every one takes the same keys, all under the pool's
// hash tag (one slot, so one Redis Cluster node):
//
//	KEYS[1] jobs      hash: job id → its entry, a JSON object
//	                  {t: tenant, p: tier, s: submitted (unix ms),
//	                   n: failures, r: re-entries, m: its ready member or ""}
//	KEYS[2] state     hash: v (the clock V), seq (arrival counter)
//	KEYS[3] finish    hash: tenant → F, the finish tag of its last task
//	KEYS[4] weights   hash: the run-time weights (PUT /admin/fairness);
//	                  "default" and "t:<tenant>". Present, it replaces the
//	                  configured weights.
//	KEYS[5] delayed   sorted set: job id by due time (unix ms)
//	KEYS[6] inflight  sorted set: job id by dispatch time (unix ms)
//	KEYS[7] measured  hash of the current minute's dispatches
//	                  (fairmeasure.go); only fairDispatch writes it
//	KEYS[8…] ready    sorted sets, one per tier, highest tier first:
//	                  "<16-digit arrival seq><job id>" by start tag
//
// and ARGV[1] the configured weights as JSON {d: default, w: {tenant: w}},
// ARGV[2] the tiers of KEYS[8…] joined by commas, ARGV[3] now (unix ms);
// a script's own arguments follow.
const fairLib = `
local function weight(tenant)
  local w
  if redis.call('EXISTS', KEYS[4]) == 1 then
    w = redis.call('HGET', KEYS[4], 't:' .. tenant) or redis.call('HGET', KEYS[4], 'default')
  end
  if not w then
    local cfg = cjson.decode(ARGV[1])
    w = cfg.w[tenant] or cfg.d
  end
  return tonumber(w)
end

local function readyKey(tier)
  local i = 8
  for t in string.gmatch(ARGV[2], '[^,]+') do
    if tonumber(t) == tonumber(tier) then return KEYS[i] end
    i = i + 1
  end
  return KEYS[#KEYS]
end

-- push files the entry at its tenant's current position: S = max(V, F),
-- then F = S + 1/weight.
local function push(id, e)
  local v = tonumber(redis.call('HGET', KEYS[2], 'v') or '0')
  local f = tonumber(redis.call('HGET', KEYS[3], e.t) or '0')
  local s = math.max(v, f)
  redis.call('HSET', KEYS[3], e.t, string.format('%.17g', s + 1 / weight(e.t)))
  local seq = redis.call('HINCRBY', KEYS[2], 'seq', 1)
  e.m = string.format('%016d', seq) .. id
  redis.call('ZADD', readyKey(e.p), string.format('%.17g', s), e.m)
  redis.call('HSET', KEYS[1], id, cjson.encode(e))
end

-- place files the entry at its due time, or at once when it is due.
local function place(id, e, due)
  if due > tonumber(ARGV[3]) then
    e.m = ''
    redis.call('ZADD', KEYS[5], due, id)
    redis.call('HSET', KEYS[1], id, cjson.encode(e))
  else
    push(id, e)
  end
end

-- unfile takes the entry out of every set; it returns it, or nil.
local function unfile(id)
  local raw = redis.call('HGET', KEYS[1], id)
  redis.call('ZREM', KEYS[5], id)
  redis.call('ZREM', KEYS[6], id)
  if not raw then return nil end
  local e = cjson.decode(raw)
  if e.m ~= '' then redis.call('ZREM', readyKey(e.p), e.m) end
  return e
end
`

// fairAdd files a job not in the pool yet; it returns 0 when the pool
// holds it already (ready, delayed or in flight).
// ARGV[4] id, [5] tenant, [6] tier, [7] submitted ms, [8] due ms.
var fairAdd = redis.NewScript(fairLib + `
if redis.call('HEXISTS', KEYS[1], ARGV[4]) == 1 then return 0 end
local e = {t = ARGV[5], p = tonumber(ARGV[6]), s = tonumber(ARGV[7]), n = 0, r = 0, m = ''}
place(ARGV[4], e, tonumber(ARGV[8]))
return 1
`)

// fairBack files a dispatched job again, due at ARGV[5], with a new tag
// then: a retry, a task a flow limit or a busy lock sent back.
// ARGV[4] id, [5] due ms, [6] 1 when the attempt failed, [7] tenant,
// [8] tier, [9] submitted ms (for an entry the pool lost).
var fairBack = redis.NewScript(fairLib + `
local e = unfile(ARGV[4])
if not e then e = {t = ARGV[7], p = tonumber(ARGV[8]), s = tonumber(ARGV[9]), n = 0, r = 0, m = ''} end
e.n = e.n + tonumber(ARGV[6])
e.r = e.r + 1
place(ARGV[4], e, tonumber(ARGV[5]))
return 1
`)

// fairDone takes a finished job out of the pool, its entry with it.
// ARGV[4] id.
var fairDone = redis.NewScript(fairLib + `
local e = unfile(ARGV[4])
redis.call('HDEL', KEYS[1], ARGV[4])
if e then return 1 end
return 0
`)

// fairDispatch files the due delayed jobs (at most ARGV[5]) at their
// tenants' current positions, then moves up to ARGV[4] (the window) less
// the jobs in flight into flight, highest tier first, lowest tag first,
// and returns them as id, entry pairs. The clock V becomes the last tag
// taken. It counts each job moved, and the dwell of a job's first
// dispatch, in KEYS[7], which expires ARGV[6] seconds later; ARGV[7] are
// the dwell buckets' upper bounds (ms) joined by commas.
var fairDispatch = redis.NewScript(fairLib + `
local now = tonumber(ARGV[3])
local due = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', now, 'LIMIT', 0, tonumber(ARGV[5]))
for _, id in ipairs(due) do
  redis.call('ZREM', KEYS[5], id)
  local raw = redis.call('HGET', KEYS[1], id)
  if raw then push(id, cjson.decode(raw)) end
end
local free = tonumber(ARGV[4]) - redis.call('ZCARD', KEYS[6])
local out = {}
local v = tonumber(redis.call('HGET', KEYS[2], 'v') or '0')
local moved = false
local function measure(e)
  redis.call('HINCRBY', KEYS[7], e.t .. ':n', 1)
  if tonumber(e.r) ~= 0 or not tonumber(e.s) then return end
  local d = math.max(math.floor(now - tonumber(e.s)), 0)
  redis.call('HINCRBY', KEYS[7], e.t .. ':dwelt', 1)
  redis.call('HINCRBY', KEYS[7], e.t .. ':dwell_ms_sum', string.format('%d', d))
  local le = 'inf'
  for b in string.gmatch(ARGV[7], '[^,]+') do
    if d <= tonumber(b) then le = b break end
  end
  redis.call('HINCRBY', KEYS[7], e.t .. ':le:' .. le, 1)
end
for i = 8, #KEYS do
  if free <= 0 then break end
  local items = redis.call('ZRANGE', KEYS[i], 0, free - 1, 'WITHSCORES')
  for j = 1, #items, 2 do
    local m = items[j]
    local id = string.sub(m, 17)
    redis.call('ZREM', KEYS[i], m)
    local raw = redis.call('HGET', KEYS[1], id)
    if raw then
      local e = cjson.decode(raw)
      e.m = ''
      redis.call('HSET', KEYS[1], id, cjson.encode(e))
      redis.call('ZADD', KEYS[6], now, id)
      measure(e)
      out[#out + 1] = id
      out[#out + 1] = raw
      free = free - 1
      v = math.max(v, tonumber(items[j + 1]))
      moved = true
    end
  end
end
if moved then
  redis.call('HSET', KEYS[2], 'v', string.format('%.17g', v))
  redis.call('EXPIRE', KEYS[7], tonumber(ARGV[6]))
end
return out
`)
