--[[ permit_guard.lua: the permit check of every permit-fenced write, after prelude.lua and
semaphore.lua, before fence_guard.lua.

src/fence/permit.rs composes each permit-fenced write as prelude.lua, semaphore.lua, this
file, fence_guard.lua, a fence_*.lua write, then permit_advance.lua. The call is the fence_*
script's own call with one more key and one more argument at the end, which this file removes
from KEYS and ARGV before anything else reads them, so the write part sees its usual KEYS and
ARGV (the guard's mark key at KEYS[1] is the owner's mark, <mark key>:<owner>):

KEYS[#KEYS]  S:permits, the semaphore's permits (owner -> expiry in ms, server clock)
ARGV[#ARGV]  the permit's owner

A permit is current while its expiry is above the server's TIME in ms. Leaves `permit_pttl`
in scope for permit_advance.lua: how long the owner's mark lasts (the permits key's PTTL, and
never less than the owner's permit).

Returns (only when the script stops here)
  {2}   the owner holds no current permit: nothing written, no mark read
Errors (nothing written)
  WRONGTYPE ...  S:permits is not a sorted set
]]
local permits_key = table.remove(KEYS)
local permit_owner = table.remove(ARGV)
local permit_now = now_ms()
local permit_expiry = redis.call('ZSCORE', permits_key, permit_owner)
if not permit_expiry or tonumber(permit_expiry) <= permit_now then return {2} end
local permit_pttl = redis.call('PTTL', permits_key)
if permit_pttl < tonumber(permit_expiry) - permit_now then
  permit_pttl = tonumber(permit_expiry) - permit_now
end
