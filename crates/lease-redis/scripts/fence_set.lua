--[[ fence_set.lua: SET a key iff the fencing token passes the fence.

KEYS[1]  applied-mark key
KEYS[2]  target key
ARGV[1]  fencing token (decimal)
ARGV[2]  value

Returns 1 once the value is set (fence_advance.lua), or {0, mark} when the guard refuses the
token (fence_guard.lua); no errors but the guard's.
]]
redis.call('SET', KEYS[2], ARGV[2])
