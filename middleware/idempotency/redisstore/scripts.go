package redisstore

import "github.com/redis/go-redis/v9"

// Every state change is one Lua script on one key (KEYS[1], the record's
// hash), so it is atomic and runs on the node that owns the key's slot.
// Times are Unix milliseconds from Redis's clock (TIME), never the gateway's.
// The key's PEXPIREAT always equals its expires field, so no janitor is needed.
// Design: docs/design/redis-store.md#scripts-and-the-records-hash lists the
// hash's fields.

// prelude is shared by the scripts. record returns the fields in the order
// of the field* constants below.
const prelude = `
local function touch(key, waiting)
  if waiting == '1' then redis.call('HSET', key, 'seen', '1') end
end
local function clock()
  local t = redis.call('TIME')
  local s, us = tonumber(t[1]), tonumber(t[2])
  return s * 1000 + math.floor(us / 1000), s * 1000000 + us
end
local function now_ms()
  return (clock())
end
local function record(key)
  return redis.call('HMGET', key, 'fp', 'state', 'token', 'owner', 'lease',
    'created', 'updated', 'expires', 'status', 'header', 'body', 'omitted')
end
`

// Indexes into the reply of record() in Lua.
const (
	fieldFP = iota
	fieldState
	fieldToken
	fieldOwner
	fieldLease
	fieldCreated
	fieldUpdated
	fieldExpires
	fieldStatus
	fieldHeader
	fieldBody
	fieldOmitted
	numFields
)

// claimScript: ARGV tenant, route, key, fingerprint, owner, lease ms,
// retention ms, waiting "1"|"0" (WithWait: a reply that changes nothing
// writes all the same, so that the WAIT after it covers the record it
// returns; wait.go). Returns {0, 0, record...} when the existing record stands, or
// {1, takeover 0|1, token, lease, created, updated, expires} when claimed:
// the caller knows the rest, and a short reply of integers is cheaper to
// read than the whole record.
//
// A live record is taken over only by the same fingerprint, and only when it
// was released or its lease ran out; anything else returns the record as it
// is, except a claim in flight under the caller's own owner token: that is
// this claim sent again (go-redis resends a script whose reply timed out),
// and it is the caller's, with its token. A record that is missing or past its expiry is created afresh, but an
// expired one still present keeps counting fencing tokens from where it was.
//
// The fencing token is the record's previous token plus one or the server
// clock in microseconds, whichever is higher. Counting alone would start
// again at 1 for a record Redis lost (a restart without persistence, a
// failover to a replica that lacked it), and an upstream could not tell the
// re-run from the original; the clock has moved on since any token was
// issued, so the first claim after a loss still gets a higher one. The
// previous token keeps tokens rising when the clock does not (two claims in
// one microsecond, a clock stepped back). Microseconds since 1970 stay below
// 2^53 until the year 2255, so a JavaScript number holds every token
// exactly; Lua numbers are doubles, exact below 2^53 too, and both HSET and
// the integer reply carry them without rounding.
const claimScript = prelude + `
local key = KEYS[1]
local tenant, route, ikey, fp, owner = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local lease, retention, waiting = tonumber(ARGV[6]), tonumber(ARGV[7]), ARGV[8]
local now, now_us = clock()
local cur = redis.call('HMGET', key, 'tenant', 'route', 'key', 'fp', 'state', 'token', 'lease', 'expires', 'created', 'owner')
local token, created, takeover = 0, now, 0
if cur[5] then
  if cur[1] ~= tenant or cur[2] ~= route or cur[3] ~= ikey then
    return redis.error_reply('ERR two scopes hash to one record key')
  end
  token = tonumber(cur[6]) or 0
  if (tonumber(cur[8]) or 0) > now then
    local st = cur[5]
    if st == 'in_flight' and cur[10] == owner then
      -- This very claim, sent again after its reply was lost: it is ours.
      touch(key, waiting)
      return {1, 0, tonumber(cur[6]), tonumber(cur[7]), tonumber(cur[9]) or now, now, tonumber(cur[8])}
    end
    local free = st == 'released' or (st == 'in_flight' and (tonumber(cur[7]) or 0) <= now)
    if cur[4] ~= fp or not free then
      touch(key, waiting)
      return {0, 0, unpack(record(key))}
    end
    takeover = 1
    created = tonumber(cur[9]) or now
  end
  redis.call('HDEL', key, 'status', 'header', 'body', 'omitted', 'watched', 'settled', 'seen')
  if takeover == 0 then
    -- A record created afresh: the counts of the expired one go with it.
    redis.call('HDEL', key, 'n_new', 'n_replayed', 'n_conflict', 'n_mismatch', 'n_released', 'first_seen', 'last_seen')
  end
end
token = math.max(token + 1, now_us)
local lease_until = now + lease
local expires = math.max(now + retention, lease_until)
redis.call('HSET', key, 'tenant', tenant, 'route', route, 'key', ikey, 'fp', fp,
  'state', 'in_flight', 'token', token, 'owner', owner, 'lease', lease_until,
  'created', created, 'updated', now, 'expires', expires)
redis.call('PEXPIREAT', key, expires)
return {1, takeover, token, lease_until, created, now, expires}
`

// renewScript: ARGV owner, lease ms. Returns 1, or 0 when not the owner. The
// key's expiry moves out with the lease when the lease would outlive it.
const renewScript = prelude + `
local key = KEYS[1]
local cur = redis.call('HMGET', key, 'state', 'owner', 'expires')
if cur[1] ~= 'in_flight' or cur[2] ~= ARGV[1] then return 0 end
local now = now_ms()
local lease_until = now + tonumber(ARGV[2])
redis.call('HSET', key, 'lease', lease_until, 'updated', now)
if lease_until > (tonumber(cur[3]) or 0) then
  redis.call('HSET', key, 'expires', lease_until)
  redis.call('PEXPIREAT', key, lease_until)
end
return 1
`

// completeScript: ARGV owner, status, header JSON, body, omitted "1"|"0",
// retention ms, waiting "1"|"0". Returns 1, or 0 when not the owner.
// Retention counts from completion. When waiting, the owner's completion
// sent again (its WAIT fell short) succeeds again, writing so that the
// next WAIT covers it.
const completeScript = prelude + `
local key = KEYS[1]
local cur = redis.call('HMGET', key, 'state', 'owner', 'watched', 'settled')
local waiting = ARGV[7]
if waiting == '1' and cur[1] == 'completed' and cur[4] == ARGV[1] then
  touch(key, waiting)
  return 1
end
if cur[1] ~= 'in_flight' or cur[2] ~= ARGV[1] then return 0 end
if waiting == '1' then redis.call('HSET', key, 'settled', ARGV[1]) end
local now = now_ms()
local expires = now + tonumber(ARGV[6])
redis.call('HSET', key, 'state', 'completed', 'status', ARGV[2], 'header', ARGV[3],
  'body', ARGV[4], 'omitted', ARGV[5], 'updated', now, 'expires', expires)
redis.call('HDEL', key, 'owner', 'lease')
redis.call('PEXPIREAT', key, expires)
if cur[3] then redis.call('PUBLISH', key .. ':changed', 'completed') end
return 1
`

// finishScript ends a claim without a response: ARGV owner, new state
// (released or unknown), waiting "1"|"0". Returns 1, or 0 when not the
// owner. The expiry set by the claim stays. When waiting, the owner's
// change sent again succeeds again, as in completeScript.
const finishScript = prelude + `
local key = KEYS[1]
local cur = redis.call('HMGET', key, 'state', 'owner', 'watched', 'settled')
local waiting = ARGV[3]
if waiting == '1' and cur[1] == ARGV[2] and cur[4] == ARGV[1] then
  touch(key, waiting)
  return 1
end
if cur[1] ~= 'in_flight' or cur[2] ~= ARGV[1] then return 0 end
if waiting == '1' then redis.call('HSET', key, 'settled', ARGV[1]) end
redis.call('HSET', key, 'state', ARGV[2], 'updated', now_ms())
redis.call('HDEL', key, 'owner', 'lease')
if cur[3] then redis.call('PUBLISH', key .. ':changed', ARGV[2]) end
return 1
`

// resolveScript turns unknown into released. Returns 1, 0 when the record is
// in another state, -1 when there is none.
const resolveScript = prelude + `
local key = KEYS[1]
local cur = redis.call('HMGET', key, 'state', 'expires')
local now = now_ms()
if not cur[1] or (tonumber(cur[2]) or 0) <= now then return -1 end
if cur[1] ~= 'unknown' then return 0 end
redis.call('HSET', key, 'state', 'released', 'updated', now)
redis.call('PUBLISH', key .. ':changed', 'released')
return 1
`

// watchScript marks a record in flight as watched, so that its end is
// published. A record not in flight has ended already.
const watchScript = `
if redis.call('HGET', KEYS[1], 'state') == 'in_flight' then
  redis.call('HSET', KEYS[1], 'watched', '1')
  return 1
end
return 0
`

// getScript returns the record, or nil when there is none or it is past
// its expiry by the server clock (the key itself may linger a moment).
// ARGV waiting "1"|"0", as in claimScript.
const getScript = prelude + `
local r = record(KEYS[1])
if not r[2] or (tonumber(r[8]) or 0) <= now_ms() then return false end
touch(KEYS[1], ARGV[1])
return r
`

// countScript adds request counts to a live record: ARGV new, replayed,
// conflict, mismatch, released, first ms, last ms (0: none). Returns 1, or
// 0 when there is no live record, whose counts went with it. It leaves the
// key's expiry as it is, so the counts expire with the record.
const countScript = prelude + `
local key = KEYS[1]
local cur = redis.call('HMGET', key, 'state', 'expires', 'first_seen', 'last_seen')
if not cur[1] or (tonumber(cur[2]) or 0) <= now_ms() then return 0 end
local names = {'n_new', 'n_replayed', 'n_conflict', 'n_mismatch', 'n_released'}
for i = 1, 5 do
  local n = tonumber(ARGV[i]) or 0
  if n ~= 0 then redis.call('HINCRBY', key, names[i], n) end
end
local first, last = tonumber(ARGV[6]) or 0, tonumber(ARGV[7]) or 0
local f, l = tonumber(cur[3]), tonumber(cur[4])
if first > 0 and (not f or first < f) then redis.call('HSET', key, 'first_seen', first) end
if last > 0 and (not l or last > l) then redis.call('HSET', key, 'last_seen', last) end
return 1
`

// countsScript returns a live record's counts in countScript's ARGV order,
// or nil when there is no live record.
const countsScript = prelude + `
local r = redis.call('HMGET', KEYS[1], 'state', 'expires', 'n_new', 'n_replayed', 'n_conflict',
  'n_mismatch', 'n_released', 'first_seen', 'last_seen')
if not r[1] or (tonumber(r[2]) or 0) <= now_ms() then return false end
return {r[3], r[4], r[5], r[6], r[7], r[8], r[9]}
`

// scripts are per Store, not package variables: a redis.Script caches its
// digest and is loaded into each node's script cache on first use.
type scripts struct {
	claim, renew, complete, finish, resolve, get, watch *redis.Script
	count, counts                                       *redis.Script
}

func newScripts() scripts {
	return scripts{
		claim:    redis.NewScript(claimScript),
		renew:    redis.NewScript(renewScript),
		complete: redis.NewScript(completeScript),
		finish:   redis.NewScript(finishScript),
		resolve:  redis.NewScript(resolveScript),
		get:      redis.NewScript(getScript),
		watch:    redis.NewScript(watchScript),
		count:    redis.NewScript(countScript),
		counts:   redis.NewScript(countsScript),
	}
}
