--[[ permit_acquire.lua: obtain one permit of a semaphore (or take the owner's over), minting a
fencing token.

KEYS[1]  S:permits (sorted set: owner -> expiry in ms, server clock)
KEYS[2]  S:size    (the permit count)
KEYS[3]  fence counter key  (only when fenced, with KEYS[4] and KEYS[5])
KEYS[4]  applied-mark key
KEYS[5]  fence-epoch key
ARGV[1]  owner (never contains NUL)
ARGV[2]  '<ttl ms>:<permits>' when unfenced, '<ttl ms>:<permits>:<scheme>:<floor>' when
         fenced (scheme 'clock' or 'counter', floor a token to mint above, '0': none; as
         acquire.lua's ARGV[3]). Packed so that a fenced call is 10 elements, like acquire.lua.

Reads and checks first, writes last. A permit is current while its expiry is above the
server's TIME in ms. When some permit is current and KEYS[2] holds another count than
<permits>, nothing changes. When the owner holds no current permit and <permits> permits are
current, nothing changes ("held"). Otherwise, when fenced, the next token is minted as
acquire.lua mints it (max(counter, mark, floor) + 1, floored by TIME in us under 'clock';
counter and mark set to it; the epoch created when absent); expired permits are removed, the
owner's permit expires at TIME + ttl, KEYS[2] is set to <permits>, and both keys expire with
the last permit.

Returns
  {1, token, before, epoch}       acquired (as acquire.lua; token '0' when unfenced)
  {0, '', pttl, now, epoch}       held: the remaining ms of the permit that expires first,
                                  max(counter, mark) and the epoch ('' when absent)
  {2, stored}                     another permit count is stored: nothing changed
Errors (nothing changed)
  TOKEN_EXHAUSTED ... the next token would exceed 2^53
  CORRUPT <key> ...   KEYS[2] is not a count in 1..10000 while a permit is current, or a fence
                      key holds what it must not
  ERR ...             ARGV[2] is malformed (TTL not in 1..2^53 ms, permits not in 1..10000)
  WRONGTYPE ...       KEYS[1] is not a sorted set, or another key not a string
]]
local owner = ARGV[1]
local ttl_arg, permits_arg, rest = string.match(ARGV[2] or '', '^(%d+):(%d+)(.*)$')
local ttl = ttl_ms(ttl_arg)
if not owner or not ttl then return redis.error_reply(BAD_TTL) end
local permits = tonumber(permits_arg)
if not string.match(permits_arg, '^[1-9]%d*$') or permits > MAX_PERMITS then
  return redis.error_reply('ERR the permit count must be in 1..10000')
end
local fenced = #KEYS == 5
local scheme, floor_arg
if fenced then
  scheme, floor_arg = string.match(rest, '^:(%a+):(.*)$')
  if not scheme then return redis.error_reply('ERR malformed permit request') end
end

local now = now_ms()
local current = redis.call('ZCOUNT', KEYS[1], '(' .. string.format('%d', now), '+inf')
local mine = redis.call('ZSCORE', KEYS[1], owner)
mine = mine and tonumber(mine) > now
local stored = read_count(KEYS[2])
if current > 0 and stored ~= nil then
  if stored == false then return corrupt(KEYS[2], NOT_A_COUNT) end
  if stored ~= permits then return {2, tostring(stored)} end
end

local function state()
  if not fenced then return '0', '' end
  return fence_state(KEYS[3], KEYS[4], KEYS[5])
end

if not mine and current >= permits then
  local first = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. string.format('%d', now), '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  local counter, epoch = state()
  if not counter then return epoch end
  return {0, '', tonumber(first[2]) - now, counter, epoch}
end

local token, before, epoch = '0', '0', ''
if fenced then
  before, epoch = state()
  if not before then return epoch end
  token, epoch = mint(KEYS[3], KEYS[4], KEYS[5], scheme, floor_arg, before, epoch)
  if not token then return epoch end
end

redis.call('ZADD', KEYS[1], now + tonumber(ttl), owner)
settle(KEYS[1], KEYS[2], now, permits)
return {1, token, before, epoch}
