--[[ acquire.lua: acquire a lease, or take it over for the same owner, minting a fencing token.

KEYS[1..n]  lock keys
KEYS[n+1]   fence counter key         (only when fenced)
KEYS[n+2]   applied-mark key          (only when fenced)
KEYS[n+3]   fence-epoch key           (only when fenced)
ARGV[1]     stored value: the owner (never contains NUL), or owner .. "\0" .. metadata
ARGV[2]     TTL in whole milliseconds (>= 1), or '<ttl>:<mark>': the waiting-writer mark's
            life in ms when it is not the TTL ('0': set no mark)
ARGV[3]     only when fenced: '<scheme>:<floor>', scheme 'clock' (floor tokens by TIME in µs)
            or 'counter', floor a token to mint above ('0': none). The lease is fenced iff
            ARGV[3] is given (then n = #KEYS - 3).

(Few arguments on purpose: Redis refuses a command of more than 10 elements from a client that
has not authenticated with a protocol error and closes the connection, instead of answering
NOAUTH; a fenced single-key acquire is exactly 10.)

Every lock key is checked before any key is changed (all-or-nothing). A key holding a value
whose owner part (the text before the first NUL) differs from ARGV[1] means "held": nothing is
changed but the waiter mark on that key's value (prelude.lua), so that its release publishes. A key holding a read-write lock's readers (a sorted set, see prelude.lua) with a
current reader means "held" too: the writer's mark (WRITER_WAITING) is set to lapse at TIME +
its life (never earlier than it did; no mark for life '0'), the key lives at least that long,
and nothing else changes;
a sorted set with no current reader is free (the SET below replaces it). Otherwise, when fenced, the next token is max(counter, mark, floor) + 1 (the mark and
the floor heal a counter that went back), and under 'clock' at least the server's TIME in µs;
it is checked against 2^53 before anything is written and stored in counter and mark. The
epoch key, when absent, is created with TIME in µs. Then every lock key is SET to ARGV[2] with
PX ARGV[3]. Same-owner takeover mints a fresh token and keeps a waiter mark.

Returns
  {1, token, before, epoch}       acquired; token '0' when unfenced; before: max(counter, mark)
                                  before this call; epoch: the fence epoch ('' when unfenced)
  {0, holder, pttl, now, epoch}   held: the holder's owner part, its PTTL in ms (-1: no expiry),
                                  max(counter, mark) and the epoch ('' when absent); held by
                                  readers: holder '', pttl the first reader's remaining ms, at
                                  most half the mark's life (the TTL without a mark: a waiting
                                  writer comes back before its mark lapses)
Errors (nothing changed)
  TOKEN_EXHAUSTED ... the next token would exceed 2^53
  CORRUPT <key> ...   the counter or the mark is not a decimal integer in 0..2^53, or the
                      epoch is not a decimal integer (checked before anything is written,
                      whether the lease is free or held)
  ERR ...             the floor is not a decimal integer, or the TTL not in 1..2^53 ms
  WRONGTYPE ...       a key holds a value that is neither a string nor a sorted set
]]
local ttl_arg, life_arg = string.match(ARGV[2] or '', '^(%d+):(%d+)$')
local value, ttl = ARGV[1], ttl_ms(ttl_arg or ARGV[2])
if not ttl or not value then return redis.error_reply(BAD_TTL) end
-- The waiting-writer mark's life: the TTL unless given; false for '0' (no mark).
local life = ttl
if life_arg then
  life = life_arg ~= '0' and ttl_ms(life_arg)
  if life == nil then return redis.error_reply(BAD_TTL) end
end
local owner = owner_of(value)
local fenced = #ARGV == 3
local n = #KEYS
local scheme, floor_arg
if fenced then
  n = n - 3
  scheme, floor_arg = string.match(ARGV[3], '^(%a+):(.*)$')
end

-- max(counter, mark) and the epoch ('' when absent); nil and a CORRUPT error reply (naming
-- the key) when the counter or the mark is not a decimal integer in 0..2^53, or the epoch is
-- not a decimal integer.
local function fence_state()
  if not fenced then return '0', '' end
  local counter_key, mark_key, epoch_key = KEYS[n + 1], KEYS[n + 2], KEYS[n + 3]
  local counter = read_token(counter_key)
  if not counter then return nil, corrupt(counter_key, NOT_A_TOKEN .. ' (the fence counter)') end
  local mark = read_token(mark_key)
  if not mark then return nil, corrupt(mark_key, NOT_A_TOKEN .. ' (the applied mark)') end
  if less(counter, mark) then counter = mark end
  local epoch = redis.call('GET', epoch_key) or ''
  if epoch ~= '' and not canon(epoch) then
    return nil, corrupt(epoch_key, 'is not a decimal integer (the fence epoch, in us)')
  end
  return counter, epoch
end

local keep = {}
for i = 1, n do
  local v, readers = lock_get(KEYS[i])
  if v and owner_of(v) ~= owner then
    local now, epoch = fence_state()
    if not now then return epoch end
    mark_waiting(KEYS[i], v)
    return {0, owner_of(v), redis.call('PTTL', KEYS[i]), now, epoch}
  end
  keep[i] = v and marked(v)
  if readers then
    local t = redis.call('TIME')
    local ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    local _, first = first_reader(KEYS[i], ms)
    if first then
      local counter, epoch = fence_state()
      if not counter then return epoch end
      if life then
        local lapse = ms + tonumber(life)
        local mark = redis.call('ZSCORE', KEYS[i], WRITER_WAITING)
        if not mark or tonumber(mark) < lapse then
          redis.call('ZADD', KEYS[i], lapse, WRITER_WAITING)
        end
        if redis.call('PTTL', KEYS[i]) < tonumber(life) then redis.call('PEXPIRE', KEYS[i], life) end
      end
      local half = math.floor(tonumber(life or ttl) / 2)
      local wait = tonumber(first) - ms
      if wait > half then wait = half end
      return {0, '', wait, counter, epoch}
    end
  end
end

local token, before, epoch = '0', '0', ''
if fenced then
  before, epoch = fence_state()
  if not before then return epoch end
  local floor = canon(floor_arg)
  if not floor then return redis.error_reply(NOT_AN_INTEGER) end
  local base = before
  if less(base, floor) then base = floor end
  if not less(base, MAX_TOKEN) then
    return redis.error_reply('TOKEN_EXHAUSTED the fence counter ' .. KEYS[n + 1] .. ' would pass 2^53')
  end
  -- base < 2^53 and TIME in µs (about 1.8e15) are exact as Lua numbers.
  local next = tonumber(base) + 1
  local now
  if scheme == 'clock' or epoch == '' then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  if scheme == 'clock' and next < now then next = now end
  if next > 9007199254740992 then
    return redis.error_reply('TOKEN_EXHAUSTED the fence counter ' .. KEYS[n + 1] .. ' would pass 2^53')
  end
  token = string.format('%d', next)
  redis.call('SET', KEYS[n + 1], token)
  redis.call('SET', KEYS[n + 2], token)
  if epoch == '' then
    epoch = string.format('%d', now)
    redis.call('SET', KEYS[n + 3], epoch)
  end
end

for i = 1, n do
  -- A takeover keeps the waiter mark: those waiting for this owner's release still are.
  if keep[i] then
    redis.call('SET', KEYS[i], with_mark(value), 'PX', ttl)
  else
    redis.call('SET', KEYS[i], value, 'PX', ttl)
  end
end
return {1, token, before, epoch}
