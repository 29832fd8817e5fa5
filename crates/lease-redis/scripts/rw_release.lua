--[[ rw_release.lua: end a reader's hold of a read-write lock; the last reader tells waiters.

KEYS[1]  the lock key
ARGV[1]  owner
ARGV[2]  release notice: '' (none), 'p:<channel>' (PUBLISH) or 's:<channel>' (SPUBLISH), as
         release.lua's ARGV[3]

When KEYS[1] holds readers, removes the owner's entry and every expired one; the key then
expires with its last entry (a waiting writer's mark included), or is deleted when none is
left. When the owner's hold was current and no current reader is left, the owner is published
on the notice channel with redis.pcall (a waiting writer wakes; a refused publish costs the
waiters their notice, never the release). A writer's string is left alone.

Returns
  1   the owner's hold was current and is ended
  0   the owner held no current hold
Errors (nothing changed)
  WRONGTYPE ...  KEYS[1] is neither a string nor a sorted set
]]
local owner = ARGV[1]
if not owner then return redis.error_reply('ERR malformed release') end
local _, readers = lock_get(KEYS[1])
if not readers then return 0 end
local now = now_ms()
local mine = redis.call('ZSCORE', KEYS[1], owner)
mine = mine and tonumber(mine) > now
redis.call('ZREM', KEYS[1], owner)
settle(KEYS[1], KEYS[1], now, nil)
if not mine then return 0 end
local notice = ARGV[2] or ''
if notice ~= '' and not first_reader(KEYS[1], now) then
  local verb = 'PUBLISH'
  if string.sub(notice, 1, 1) == 's' then verb = 'SPUBLISH' end
  redis.pcall(verb, string.sub(notice, 3), owner)
end
return 1
