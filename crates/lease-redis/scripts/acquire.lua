--[[ acquire.lua: acquire a lease, or take it over for the same owner, minting a fencing token.

KEYS[1..n]  lock keys (n = ARGV[4])
KEYS[n+1]   fence counter key         (only when fenced)
KEYS[n+2]   applied-mark key          (only when fenced)
ARGV[1]     owner (never contains NUL)
ARGV[2]     stored value: the owner, or owner .. "\0" .. metadata
ARGV[3]     TTL in whole milliseconds (>= 1)
ARGV[4]     n, the number of lock keys; the lease is fenced iff #KEYS == n + 2

Every lock key is checked before any key is changed (all-or-nothing). A key holding a value
whose owner part (the text before the first NUL) differs from ARGV[1] means "held": nothing is
changed. Otherwise, when fenced, the next token is max(counter, mark) + 1 (counter healing: a
mark ahead of the counter lifts it); it is checked against 2^53 before anything is written, and
stored in both counter and mark as a decimal string formatted from an exact integer. Then every
lock key is SET to ARGV[2] with PX ARGV[3]. Same-owner takeover mints a fresh token.

Returns
  {1, token}          acquired; token is the minted token as a decimal string ('0' unfenced)
  {0, holder, pttl}   held: the holder's owner part and its PTTL in ms (-1: no expiry)
Errors (nothing changed)
  TOKEN_EXHAUSTED ... the next token would exceed 2^53
  ERR ...             the counter or the mark is not a decimal integer
  WRONGTYPE ...       a key holds a value that is not a string
]]
-- helpers:begin (identical in every script; a unit test checks it)
-- The owner part of a stored lock value: the text before the first NUL byte.
local function owner_of(v)
  local i = string.find(v, '\0', 1, true)
  if i then return string.sub(v, 1, i - 1) end
  return v
end
-- Whether canonical decimal integer a < b. Compared as text, never as Lua numbers (doubles,
-- exact only up to 2^53), so values of any size compare exactly.
local function less(a, b)
  if #a ~= #b then return #a < #b end
  for i = 1, #a do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return false
end
-- `s` in canonical form (no sign, no leading zeros), or nil unless `s` is a decimal integer
-- in 0..2^64-1, optionally with a leading '+' (the rule of Rust's u64 parser).
local function canon(s)
  if type(s) ~= 'string' then return nil end
  local d = string.match(s, '^%+?(%d+)$')
  if not d then return nil end
  d = string.match(d, '^0*(%d.*)$')
  if less('18446744073709551615', d) then return nil end
  return d
end
-- The canonical integer stored at `key`, '0' when absent, or nil when it is not an integer
-- (a key of another type raises WRONGTYPE, which aborts the script).
local function read_int(key)
  local v = redis.call('GET', key)
  if not v then return '0' end
  return canon(v)
end
local NOT_AN_INTEGER = 'ERR value is not an integer or out of range'
local MAX_TOKEN = '9007199254740992' -- 2^53
-- helpers:end

local owner, value, ttl = ARGV[1], ARGV[2], ARGV[3]
local n = tonumber(ARGV[4])

for i = 1, n do
  local v = redis.call('GET', KEYS[i])
  if v and owner_of(v) ~= owner then
    return {0, owner_of(v), redis.call('PTTL', KEYS[i])}
  end
end

local token = '0'
if #KEYS == n + 2 then
  local counter_key, mark_key = KEYS[n + 1], KEYS[n + 2]
  local counter, mark = read_int(counter_key), read_int(mark_key)
  if not counter or not mark then return redis.error_reply(NOT_AN_INTEGER) end
  local base = counter
  if less(counter, mark) then base = mark end
  if not less(base, MAX_TOKEN) then
    return redis.error_reply('TOKEN_EXHAUSTED the fence counter ' .. counter_key .. ' would pass 2^53')
  end
  -- base < 2^53, so tonumber(base) + 1 is exact and '%d' prints it exactly.
  token = string.format('%d', tonumber(base) + 1)
  redis.call('SET', counter_key, token)
  redis.call('SET', mark_key, token)
end

for i = 1, n do
  redis.call('SET', KEYS[i], value, 'PX', ttl)
end
return {1, token}
