--[[ fair_acquire.lua: one fair attempt: the lock for the first in line, else a heartbeat of
the owner's place in the queue.

KEYS[1]  F         (the lock key)
KEYS[2]  F:queue   (sorted set: owner -> arrival sequence)
KEYS[3]  F:places  (sorted set: owner -> place expiry in ms, server clock)
KEYS[4]  fence counter key  (only when fenced, with KEYS[5] and KEYS[6])
KEYS[5]  applied-mark key
KEYS[6]  fence-epoch key
ARGV[1]  stored value: the owner, or owner .. "\0" .. metadata
ARGV[2]  '<ttl ms>:<place ms, 0: never queue>:<scheme>:<floor>:<notice>' (scheme and floor
         empty when unfenced; notice '' or 'p:'/'s:' and the wake channel without the owner).
         Packed so that a fenced call is 10 elements, like acquire.lua.

Reads and checks first, writes last. Places at or below the server's TIME in ms are dropped
with their queue entries (earliest first), then the queue's front entries without a live
place, at most FAIR_PRUNE in all (read_fair); when the budget runs out before a live head is
found, a free lock is granted to nobody by this call. When F holds the owner, or F is free
and the queue is empty or the owner is its head: when fenced, a token is minted as
acquire.lua mints it; F is set to ARGV[1] for the TTL; the owner's place is removed.
Otherwise nothing is granted; with a place TTL the owner is queued at the back when it has no
live place (refused when FAIR_MAX places are live), and its place expires at TIME + place
either way. The queue and places keys expire
with the last place (deleted when nobody waits). When F is free and the head changed (its
predecessor expired), the new head is woken on its channel, unless it is the owner.

Returns
  {1, token, before, epoch}   acquired (as acquire.lua; token '0' when unfenced)
  {0, holder, -2, now, epoch} not granted: the holder's owner, or the head the free lock is
                              kept for ('' when none); max(counter, mark), the epoch
  {3, max}                    refused, nothing changed: the owner has no live place and
                              FAIR_MAX (max) places are live
Errors (nothing changed)
  TOKEN_EXHAUSTED, CORRUPT ...  as acquire.lua
  ERR ...                       ARGV[2] malformed (TTL or place not in 1..2^53 ms)
  WRONGTYPE ...                 F not a string, F:queue or F:places not a sorted set
]]
local value = ARGV[1]
local ttl_arg, place_arg, scheme, floor_arg, notice =
  string.match(ARGV[2] or '', '^(%d+):(%d+):(%a*):(%d*):(.*)$')
local ttl = ttl_ms(ttl_arg)
if not value or not ttl then return redis.error_reply(BAD_TTL) end
local place
if place_arg ~= '0' then
  place = ttl_ms(place_arg)
  if not place then return redis.error_reply(BAD_TTL) end
end
local fenced = #KEYS == 6
if fenced and scheme == '' then return redis.error_reply('ERR malformed fair request') end
local owner = owner_of(value)

local now = now_ms()
local f = read_fair(now, nil)
local before, epoch = '0', ''
if fenced then
  before, epoch = fence_state(KEYS[4], KEYS[5], KEYS[6])
  if not before then return epoch end
end
local head = f.head
if f.holder == owner or (not f.holder and (head == owner or (not head and not f.blocked))) then
  local token = '0'
  if fenced then
    token, epoch = mint(KEYS[4], KEYS[5], KEYS[6], scheme, floor_arg, before, epoch)
    if not token then return epoch end
  end
  write_prune(f)
  redis.call('SET', KEYS[1], value, 'PX', ttl)
  remove(owner)
  settle(now)
  return {1, token, before, epoch}
end

if place then
  local live = has_place(f, owner, now)
  if not live and live_count(now) >= FAIR_MAX then return {3, FAIR_MAX} end
  write_prune(f)
  if not live then enqueue(owner) end
  redis.call('ZADD', KEYS[3], string.format('%d', now + tonumber(place)), owner)
else
  write_prune(f)
end
settle(now)
wake(f, false, notice, owner)
return {0, f.holder or head or '', -2, before, epoch}
