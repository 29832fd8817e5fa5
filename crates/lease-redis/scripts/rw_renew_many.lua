--[[ rw_renew_many.lua: rw_renew.lua's rule for several readers' holds in one call (a batch of
renewals, possibly of several read-write locks).

KEYS[i]     reader i's lock key
ARGV[2i-1]  reader i's owner
ARGV[2i]    reader i's TTL in whole milliseconds (>= 1)

Each reader is judged alone, as rw_renew.lua judges it, by the server's TIME in ms (read once):
if its key holds readers and the owner's hold is current (its expiry above TIME), it expires
at TIME + ttl (a waiting writer does not stop it); otherwise nothing of it changes. One
reader's answer never changes another's. Then each key where a hold was renewed is settled
once (expired entries removed, the key expiring with its last entry): the state rw_renew.lua
called reader after reader leaves, without settling a key once per reader (the readers of a
batch are mostly of one key).

Returns an array, one entry per reader, in order:
  1   renewed
  0   not held (absent, a writer's string, or no current hold of the owner): nothing of it
      changed
 -1   its key is neither a string nor a sorted set (WRONGTYPE): nothing of it changed
Errors (nothing changed)
  ERR malformed renewal batch   a TTL not in 1..2^53 ms, or arguments that do not pair with KEYS
]]
if #KEYS == 0 or #ARGV ~= 2 * #KEYS then
  return redis.error_reply('ERR malformed renewal batch')
end
for i = 2, #ARGV, 2 do
  if not ttl_ms(ARGV[i]) then return redis.error_reply('ERR malformed renewal batch') end
end
local now = now_ms()
local out, kinds, renewed = {}, {}, {}
for i = 1, #KEYS do
  local key, owner, ttl = KEYS[i], ARGV[2 * i - 1], ARGV[2 * i]
  -- lock_get's test, without its abort, once per key (a renewal never changes a key's type):
  -- a string or nothing is no reader's hold.
  local kind = kinds[key]
  if not kind then
    kind = 'none'
    if type(redis.pcall('GET', key)) == 'table' then
      kind = redis.call('TYPE', key)['ok'] == 'zset' and 'zset' or 'other'
    end
    kinds[key] = kind
  end
  local r = 0
  if kind == 'other' then
    r = -1
  elseif kind == 'zset' then
    local mine = redis.call('ZSCORE', key, owner)
    if mine and tonumber(mine) > now then
      redis.call('ZADD', key, now + tonumber(ttl), owner)
      if not renewed[key] then
        renewed[key] = true
        renewed[#renewed + 1] = key
      end
      r = 1
    end
  end
  out[#out + 1] = r
end
for _, key in ipairs(renewed) do settle(key, key, now, nil) end
return out
