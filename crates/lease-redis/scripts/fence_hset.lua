--[[ fence_hset.lua: HSET one field iff the fencing token passes the fence.

KEYS[1]  applied-mark key
KEYS[2]  target hash key
ARGV[1]  fencing token (decimal)
ARGV[2]  field
ARGV[3]  value

Returns 1 once the field is set (fence_advance.lua), or {0, mark} when the guard refuses the
token (fence_guard.lua). Errors (nothing written, mark unmoved): the guard's, and
  WRONGTYPE ...  KEYS[2] holds a value that is not a hash
]]
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
