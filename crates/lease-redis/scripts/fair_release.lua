--[[ fair_release.lua: release a fair lock this owner holds, or leave its queue; then wake the
next waiter alone.

KEYS[1]  F
KEYS[2]  F:queue   (sorted set: owner -> arrival sequence)
KEYS[3]  F:places
KEYS[4]  fence counter key (only when a term is checked)
ARGV[1]  owner
ARGV[2]  '<mode>:<term>:<notice>': mode 'r' (release) or 'l' (leave: never touches F); term
         the token of the term being released ('' when none; given iff KEYS[4] is); notice
         '' or 'p:'/'s:' and the wake channel without the owner

Drops expired places as fair_acquire.lua does (read_fair, the owner aside when finding the
head: it is removed). Release: when F holds the owner (and the
counter equals the term, when given), F is deleted. Either mode removes the owner's place.
The queue and places keys then expire with the last place. When F is free and the lock was
just released or the head changed, the head alone is woken on its channel.

Returns
  1   release: F held the owner and is deleted; leave: the owner had a place
  0   otherwise
Errors (nothing changed)
  ERR malformed release  ARGV malformed
  CORRUPT <key>          the counter is not a decimal integer in 0..2^53
  WRONGTYPE ...          as fair_acquire.lua
]]
local owner = ARGV[1]
local mode, term, notice = string.match(ARGV[2] or '', '^([rl]):(%d*):(.*)$')
if not owner or not mode or ((term ~= '') ~= (#KEYS == 4)) then
  return redis.error_reply('ERR malformed release')
end
local now = now_ms()
local f = read_fair(now, owner)
local held = mode == 'r' and f.holder == owner
if held and term ~= '' then
  local counter = read_token(KEYS[4])
  if not counter then return corrupt(KEYS[4], NOT_A_TOKEN) end
  if counter ~= canon(term) then held = false end
end
local had = has_place(f, owner, now)
write_prune(f)
if held then
  redis.call('DEL', KEYS[1])
  f.holder = nil
end
remove(owner)
settle(now)
wake(f, held, notice, nil)
if (mode == 'l' and had) or held then return 1 end
return 0
