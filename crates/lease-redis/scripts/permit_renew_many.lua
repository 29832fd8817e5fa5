--[[ permit_renew_many.lua: permit_renew.lua's rule for several permits in one call (a batch of
renewals, possibly of several semaphores).

KEYS[2i-1]  permit i's S:permits
KEYS[2i]    permit i's S:size
ARGV[2i-1]  permit i's owner
ARGV[2i]    permit i's TTL in whole milliseconds (>= 1)

Each permit is judged alone, as permit_renew.lua judges it: if the owner's permit is current
(its expiry above the server's TIME in ms), it expires at TIME + ttl, expired permits are
removed and both keys expire with the last permit; otherwise nothing of it changes. One
permit's answer never changes another's.

Returns an array, one entry per permit, in order:
  1   renewed
  0   not held: nothing of it changed
 -1   S:permits is not a sorted set (WRONGTYPE): nothing of it changed
Errors (nothing changed)
  ERR malformed renewal batch   a TTL not in 1..2^53 ms, or arguments that do not pair with KEYS
]]
if #KEYS == 0 or #KEYS ~= #ARGV or #KEYS % 2 ~= 0 then
  return redis.error_reply('ERR malformed renewal batch')
end
for i = 2, #ARGV, 2 do
  if not ttl_ms(ARGV[i]) then return redis.error_reply('ERR malformed renewal batch') end
end
local now = now_ms()
local out = {}
for i = 1, #KEYS, 2 do
  local owner, ttl = ARGV[i], ARGV[i + 1]
  local mine = redis.pcall('ZSCORE', KEYS[i], owner)
  if type(mine) == 'table' and mine.err then
    out[#out + 1] = -1
  elseif not mine or tonumber(mine) <= now then
    out[#out + 1] = 0
  else
    redis.call('ZADD', KEYS[i], now + tonumber(ttl), owner)
    settle(KEYS[i], KEYS[i + 1], now, nil)
    out[#out + 1] = 1
  end
end
return out
