--[[ renew_many.lua: renew.lua's rule for several leases in one call (a batch of renewals).

KEYS        every lease's lock keys, lease after lease
ARGV[3i-2]  how many keys lease i has (>= 1)
ARGV[3i-1]  lease i's owner
ARGV[3i]    lease i's TTL in whole milliseconds (>= 1)

Each lease is judged alone, as renew.lua judges it: if every one of its keys holds a value
whose owner part equals its owner, PEXPIRE each; otherwise nothing of it changes. One lease's
answer never changes another's.

Returns an array, one entry per lease, in order:
  1   renewed
  0   not held (a key is absent, held by another owner, or by a read-write lock's readers);
      nothing of it changed
 -1   a key holds a value that is neither a string nor a sorted set (WRONGTYPE); nothing of
      it changed
Errors (nothing changed)
  ERR malformed renewal batch   a key count that is not in 1..999999, a TTL not in 1..2^53 ms,
                                or counts that do not add up to #KEYS
]]
-- Every lease's key count and TTL are checked before anything changes.
local total = 0
for i = 1, #ARGV, 3 do
  local n = ARGV[i]
  if not string.match(n, '^[1-9]%d*$') or #n > 6 or not ttl_ms(ARGV[i + 2]) then
    return redis.error_reply('ERR malformed renewal batch')
  end
  total = total + tonumber(n)
end
if #ARGV % 3 ~= 0 or total ~= #KEYS then return redis.error_reply('ERR malformed renewal batch') end
local out, k = {}, 1
for i = 1, #ARGV, 3 do
  local n, owner, ttl = tonumber(ARGV[i]), ARGV[i + 1], ARGV[i + 2]
  local r = 1
  for j = k, k + n - 1 do
    local v = redis.pcall('GET', KEYS[j])
    if type(v) == 'table' then
      if redis.call('TYPE', KEYS[j])['ok'] ~= 'zset' then r = -1 break end
      v = false
    end
    if not v or owner_of(v) ~= owner then r = 0 break end
  end
  if r == 1 then
    for j = k, k + n - 1 do redis.call('PEXPIRE', KEYS[j], ttl) end
  end
  out[#out + 1] = r
  k = k + n
end
return out
