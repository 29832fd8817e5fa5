--[[ permit_pttl.lua: the remaining TTL of an owner's permit (read only).

KEYS[1]  S:permits
ARGV[1]  owner

Returns
  {1, ms}  the owner's permit is current: its remaining ms by the server's clock
  {0}      the owner holds no current permit
Errors
  WRONGTYPE ...  KEYS[1] is not a sorted set
]]
local now = now_ms()
local mine = redis.call('ZSCORE', KEYS[1], ARGV[1] or '')
if not mine or tonumber(mine) <= now then return {0} end
return {1, tonumber(mine) - now}
