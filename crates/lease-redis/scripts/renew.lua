--[[ renew.lua: extend a lease this owner holds on every key.

KEYS[1..n]  lock keys
ARGV[1]     owner
ARGV[2]     TTL in whole milliseconds (>= 1)

If every key holds a value whose owner part equals ARGV[1], PEXPIRE each; otherwise change
nothing (a key holding a read-write lock's readers is not held).

Returns
  1   renewed
  0   not held (some key is absent or held by another owner); nothing changed
Errors
  WRONGTYPE ...  a key holds a value that is neither a string nor a sorted set; nothing changed
  ERR ...        the TTL is not whole milliseconds in 1..2^53; nothing changed
]]
local owner, ttl = ARGV[1], ttl_ms(ARGV[2])
if not ttl or not owner then return redis.error_reply(BAD_TTL) end
for i = 1, #KEYS do
  local v = lock_get(KEYS[i])
  if not v or owner_of(v) ~= owner then return 0 end
end
for i = 1, #KEYS do
  redis.call('PEXPIRE', KEYS[i], ttl)
end
return 1
