--[[ rw_acquire.lua: obtain a reader's hold of a read-write lock (or take the owner's over),
minting a fencing token from the lock's fence counter.

KEYS[1]  the lock key: a writer's string (the plain lock), or the readers' sorted set (owner
         -> expiry in ms of the server's clock, and the writer's mark WRITER_WAITING)
KEYS[2]  fence counter key  (only when fenced, with KEYS[3] and KEYS[4])
KEYS[3]  applied-mark key
KEYS[4]  fence-epoch key
ARGV[1]  owner (never contains NUL)
ARGV[2]  TTL in whole milliseconds (>= 1)
ARGV[3]  only when fenced: '<scheme>:<floor>', as acquire.lua's ARGV[3]

Reads and checks first, writes last. A writer's string at KEYS[1] means "held" (its owner and
PTTL; the writer's value gets the waiter mark, see prelude.lua). A current writer's mark (scored above the server's TIME in ms) means "held" too unless
the owner is a current reader already (its hold is taken over). Otherwise a token is minted
as acquire.lua mints it (when fenced), expired entries are removed, the owner's hold expires
at TIME + ttl, and the key expires with its last entry.

Returns
  {1, token, before, epoch}       acquired (as acquire.lua; token '0' when unfenced)
  {0, holder, pttl, now, epoch}   held: the writer's owner and PTTL, or '' and the ms until the
                                  writer's mark lapses; max(counter, mark) and the epoch
Errors (nothing changed)
  TOKEN_EXHAUSTED ... the next token would exceed 2^53
  CORRUPT <key> ...   a fence key holds what it must not
  ERR ...             the TTL is not whole milliseconds in 1..2^53, or ARGV[3] is malformed
  WRONGTYPE ...       KEYS[1] is neither a string nor a sorted set, or a fence key not a string
]]
local owner, ttl = ARGV[1], ttl_ms(ARGV[2])
if not ttl or not owner then return redis.error_reply(BAD_TTL) end
local fenced = #KEYS == 4
local scheme, floor_arg
if fenced then
  scheme, floor_arg = string.match(ARGV[3] or '', '^(%a+):(.*)$')
  if not scheme then return redis.error_reply('ERR malformed shared request') end
end
local function state()
  if not fenced then return '0', '' end
  return fence_state(KEYS[2], KEYS[3], KEYS[4])
end

local writer = lock_get(KEYS[1])
if writer then
  local counter, epoch = state()
  if not counter then return epoch end
  mark_waiting(KEYS[1], writer)
  return {0, owner_of(writer), redis.call('PTTL', KEYS[1]), counter, epoch}
end
local now = now_ms()
local mine = redis.call('ZSCORE', KEYS[1], owner)
mine = mine and tonumber(mine) > now
local mark = redis.call('ZSCORE', KEYS[1], WRITER_WAITING)
if not mine and mark and tonumber(mark) > now then
  local counter, epoch = state()
  if not counter then return epoch end
  return {0, '', tonumber(mark) - now, counter, epoch}
end

local token, before, epoch = '0', '0', ''
if fenced then
  before, epoch = state()
  if not before then return epoch end
  token, epoch = mint(KEYS[2], KEYS[3], KEYS[4], scheme, floor_arg, before, epoch)
  if not token then return epoch end
end
redis.call('ZADD', KEYS[1], now + tonumber(ttl), owner)
settle(KEYS[1], KEYS[1], now, nil)
return {1, token, before, epoch}
