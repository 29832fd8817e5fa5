--[[ permit_inspect.lua: a semaphore's current permits, count, fence counter and mark (read
only).

KEYS[1]  S:permits
KEYS[2]  S:size
KEYS[3]  fence counter key (optional, with KEYS[4])
KEYS[4]  applied-mark key  (optional)
ARGV     none

Returns {count, holders, counter, mark}
  count    the stored permit count while a permit is current, else ''
  holders  {owner, ms, owner, ms, ...}: the current permits with their remaining ms, the one
           that expires first first (ties by owner)
  counter  the fence counter in canonical form ('0' when absent or unfenced)
  mark     the applied mark likewise
Errors
  WRONGTYPE ...  KEYS[1] is not a sorted set, or another key not a string
  CORRUPT <key>  the count (while a permit is current), the counter or the mark holds what it
                 must not
]]
local now = now_ms()
local raw = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. string.format('%d', now), '+inf', 'WITHSCORES')
local holders = {}
for i = 1, #raw, 2 do
  holders[#holders + 1] = raw[i]
  holders[#holders + 1] = tonumber(raw[i + 1]) - now
end
local count = ''
local stored = read_count(KEYS[2])
if #holders > 0 and stored ~= nil then
  if stored == false then return corrupt(KEYS[2], NOT_A_COUNT) end
  count = tostring(stored)
end
local counter, mark = '0', '0'
if #KEYS >= 4 then
  counter = read_token(KEYS[3])
  if not counter then return corrupt(KEYS[3], NOT_A_TOKEN .. ' (the fence counter)') end
  mark = read_token(KEYS[4])
  if not mark then return corrupt(KEYS[4], NOT_A_TOKEN .. ' (the applied mark)') end
end
return {count, holders, counter, mark}
