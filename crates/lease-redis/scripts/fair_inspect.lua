--[[ fair_inspect.lua: a fair lock's holder, its live waiters in queue order with the time
each place has left, and the fence counter and mark (read only).

KEYS[1]  F         (the lock key)
KEYS[2]  F:queue   (sorted set: owner -> arrival sequence)
KEYS[3]  F:places  (sorted set: owner -> place expiry in ms, server clock)
KEYS[4]  fence counter key (optional, with KEYS[5])
KEYS[5]  applied-mark key  (optional)
ARGV     none

Places at or below the server's TIME in ms are not shown. Bounded: the first FAIR_SCAN queue
entries are read, and the first FAIR_SHOWN of them with a live place are listed; `waiting`
counts every live place.

Returns {holder, holder_ms, waiters, counter, mark, waiting}
  holder     the owner part of F's value while F is held, else ''
  holder_ms  its PTTL in ms (-1: no expiry; -2: not held)
  waiters    {owner, ms, owner, ms, ...}: the live waiters, first in line first, each with
             its place's remaining ms
  counter    the fence counter in canonical form ('0' when absent or unfenced)
  mark       the applied mark likewise
  waiting    the live places: every waiter, listed or not
Errors
  WRONGTYPE ...  F not a string, F:queue or F:places not a sorted set, or a fence
                 key not a string
  CORRUPT <key>  the counter or the mark holds what it must not
]]
local now = now_ms()
local value = redis.call('GET', KEYS[1])
local out = {'', -2, {}, '0', '0', live_count(now)}
if value then
  out[1], out[2] = owner_of(value), redis.call('PTTL', KEYS[1])
end
local front = redis.call('ZRANGE', KEYS[2], 0, FAIR_SCAN - 1)
local shown = 0
for _, o in ipairs(front) do
  if shown >= FAIR_SHOWN then break end
  local e = redis.call('ZSCORE', KEYS[3], o)
  if e and tonumber(e) > now then
    out[3][#out[3] + 1] = o
    out[3][#out[3] + 1] = tonumber(e) - now
    shown = shown + 1
  end
end
if #KEYS >= 5 then
  out[4] = read_token(KEYS[4])
  if not out[4] then return corrupt(KEYS[4], NOT_A_TOKEN .. ' (the fence counter)') end
  out[5] = read_token(KEYS[5])
  if not out[5] then return corrupt(KEYS[5], NOT_A_TOKEN .. ' (the applied mark)') end
end
return out
