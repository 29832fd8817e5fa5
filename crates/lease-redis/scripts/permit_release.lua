--[[ permit_release.lua: give an owner's permit back, then tell one waiter.

KEYS[1]  S:permits
KEYS[2]  S:size
ARGV[1]  owner
ARGV[2]  release notice: '' (none), 'p:<channel>' (PUBLISH) or 's:<channel>' (SPUBLISH), as
         release.lua's ARGV[3]

Removes the owner's permit and every expired one; both keys then expire with the last permit,
or are deleted when none is left (the next obtain may store another count). When the owner's
permit was current, the owner is published on the notice channel with redis.pcall (a refused
publish costs the waiters their notice, never the release).

Returns
  1   the owner's permit was current and is given back
  0   the owner held no current permit
Errors (nothing changed)
  WRONGTYPE ...  KEYS[1] is not a sorted set
]]
local owner = ARGV[1]
if not owner then return redis.error_reply('ERR malformed release') end
local now = now_ms()
local mine = redis.call('ZSCORE', KEYS[1], owner)
mine = mine and tonumber(mine) > now
redis.call('ZREM', KEYS[1], owner)
settle(KEYS[1], KEYS[2], now, nil)
local notice = ARGV[2] or ''
if mine and notice ~= '' then
  local verb = 'PUBLISH'
  if string.sub(notice, 1, 1) == 's' then verb = 'SPUBLISH' end
  redis.pcall(verb, string.sub(notice, 3), owner)
end
if mine then return 1 end
return 0
