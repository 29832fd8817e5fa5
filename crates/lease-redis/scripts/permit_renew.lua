--[[ permit_renew.lua: extend an owner's current permit.

KEYS[1]  S:permits
KEYS[2]  S:size
ARGV[1]  owner
ARGV[2]  TTL in whole milliseconds (>= 1)

If the owner's permit is current (its expiry above the server's TIME in ms), it expires at
TIME + ttl, expired permits are removed and both keys expire with the last permit; otherwise
nothing changes.

Returns
  1   renewed
  0   not held: nothing changed
Errors (nothing changed)
  WRONGTYPE ...  KEYS[1] is not a sorted set
  ERR ...        the TTL is not whole milliseconds in 1..2^53
]]
local owner, ttl = ARGV[1], ttl_ms(ARGV[2])
if not ttl or not owner then return redis.error_reply(BAD_TTL) end
local now = now_ms()
local mine = redis.call('ZSCORE', KEYS[1], owner)
if not mine or tonumber(mine) <= now then return 0 end
redis.call('ZADD', KEYS[1], now + tonumber(ttl), owner)
settle(KEYS[1], KEYS[2], now, nil)
return 1
