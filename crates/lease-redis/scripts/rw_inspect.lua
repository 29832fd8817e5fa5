--[[ rw_inspect.lua: a read-write lock's writer or readers, the writer's mark, and the fence
counter and mark (read only).

KEYS[1]  the lock key
KEYS[2]  fence counter key (optional, with KEYS[3])
KEYS[3]  applied-mark key  (optional)
ARGV     none

Returns {writer, writer_ms, readers, waiting_ms, counter, mark}
  writer      the writer's owner part while a writer's string is at KEYS[1], else ''
  writer_ms   its PTTL in ms (-1: no expiry; -2: no writer)
  readers     {owner, ms, owner, ms, ...}: the current readers with their remaining ms, the
              one that expires first first (ties by owner)
  waiting_ms  the ms until a current writer's mark lapses, -1 when none stands
  counter     the fence counter in canonical form ('0' when absent or unfenced)
  mark        the applied mark likewise
Errors
  WRONGTYPE ...  KEYS[1] is neither a string nor a sorted set, or a fence key not a string
  CORRUPT <key>  the counter or the mark holds what it must not
]]
local out = {'', -2, {}, -1, '0', '0'}
local writer, readers = lock_get(KEYS[1])
if writer then
  out[1], out[2] = owner_of(writer), redis.call('PTTL', KEYS[1])
elseif readers then
  local now = now_ms()
  local raw = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. string.format('%d', now), '+inf', 'WITHSCORES')
  for i = 1, #raw, 2 do
    local ms = tonumber(raw[i + 1]) - now
    if raw[i] == WRITER_WAITING then
      out[4] = ms
    else
      out[3][#out[3] + 1] = raw[i]
      out[3][#out[3] + 1] = ms
    end
  end
end
if #KEYS >= 3 then
  out[5] = read_token(KEYS[2])
  if not out[5] then return corrupt(KEYS[2], NOT_A_TOKEN .. ' (the fence counter)') end
  out[6] = read_token(KEYS[3])
  if not out[6] then return corrupt(KEYS[3], NOT_A_TOKEN .. ' (the applied mark)') end
end
return out
