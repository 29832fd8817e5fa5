--[[ rw_pttl.lua: the remaining TTL of a reader's hold of a read-write lock (read only).

KEYS[1]  the lock key
ARGV[1]  owner

Returns
  {1, ms}  the owner's hold is current: its remaining ms by the server's clock
  {0}      the owner holds none (absent, a writer's string, or no current hold)
Errors
  WRONGTYPE ...  KEYS[1] is neither a string nor a sorted set
]]
local _, readers = lock_get(KEYS[1])
if not readers then return {0} end
local now = now_ms()
local mine = redis.call('ZSCORE', KEYS[1], ARGV[1] or '')
if not mine or tonumber(mine) <= now then return {0} end
return {1, tonumber(mine) - now}
