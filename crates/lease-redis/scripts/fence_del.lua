--[[ fence_del.lua: DEL keys iff the fencing token passes the fence.

KEYS[1]     applied-mark key
KEYS[2..]   keys to delete (none is allowed: then only the mark advances)
ARGV[1]     fencing token (decimal)

Returns 1 once the keys are deleted (fence_advance.lua), or {0, mark} when the guard refuses
the token (fence_guard.lua); no errors but the guard's.
]]
for i = 2, #KEYS do
  redis.call('DEL', KEYS[i])
end
