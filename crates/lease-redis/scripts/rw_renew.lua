--[[ rw_renew.lua: extend a reader's current hold of a read-write lock.

KEYS[1]  the lock key
ARGV[1]  owner
ARGV[2]  TTL in whole milliseconds (>= 1)

If KEYS[1] holds readers and the owner's hold is current (its expiry above the server's TIME
in ms), it expires at TIME + ttl (a waiting writer does not stop it), expired entries are
removed and the key expires with its last entry; otherwise nothing changes.

Returns
  1   renewed
  0   not held (absent, a writer's string, or no current hold of the owner): nothing changed
Errors (nothing changed)
  WRONGTYPE ...  KEYS[1] is neither a string nor a sorted set
  ERR ...        the TTL is not whole milliseconds in 1..2^53
]]
local owner, ttl = ARGV[1], ttl_ms(ARGV[2])
if not ttl or not owner then return redis.error_reply(BAD_TTL) end
local _, readers = lock_get(KEYS[1])
if not readers then return 0 end
local now = now_ms()
local mine = redis.call('ZSCORE', KEYS[1], owner)
if not mine or tonumber(mine) <= now then return 0 end
redis.call('ZADD', KEYS[1], now + tonumber(ttl), owner)
settle(KEYS[1], KEYS[1], now, nil)
return 1
