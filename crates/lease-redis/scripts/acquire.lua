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
