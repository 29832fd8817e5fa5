--[[ pttl.lua: the remaining TTL of a lease this owner holds.

KEYS[1..n]  lock keys
ARGV[1]     owner

Returns
  {1, ms}  every key holds ARGV[1]: the minimum PTTL over the keys in ms (-1: none expires)
  {0}      not held by ARGV[1] (a key holding a read-write lock's readers is not)
Errors
  WRONGTYPE ...  a key holds a value that is neither a string nor a sorted set
]]
local owner = ARGV[1]
for i = 1, #KEYS do
  local v = lock_get(KEYS[i])
  if not v or owner_of(v) ~= owner then return {0} end
end
local min = -1
for i = 1, #KEYS do
  local p = redis.call('PTTL', KEYS[i])
  if p >= 0 and (min < 0 or p < min) then min = p end
end
return {1, min}
