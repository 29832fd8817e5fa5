--[[ semaphore.lua: the helpers every permit_*.lua script uses, after prelude.lua.

src/backend/semaphore.rs composes each permit script as prelude.lua, this file, then the
script's own file. A semaphore S is KEYS[1] = S:permits, a sorted set of owner -> expiry in
ms of the server's clock, and KEYS[2] = S:size, the permit count its holders obtained with
(see lease-core's semaphore module for the rule; the in-memory backend is its executable
spec). This file is never sent on its own; it returns nothing.
]]
-- The server's clock in whole ms (TIME inside the script: expiry is judged by the server).
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local MAX_PERMITS = 10000
local NOT_A_COUNT = 'is not a permit count in 1..10000'
-- The count stored at `key` as a number, nil when absent, false when it is not a count in
-- 1..MAX_PERMITS. A key of another type raises WRONGTYPE, which aborts the script.
local function read_count(key)
  local v = redis.call('GET', key)
  if not v then return nil end
  if not string.match(v, '^[1-9]%d?%d?%d?%d?$') then return false end
  local n = tonumber(v)
  if n > MAX_PERMITS then return false end
  return n
end
-- Writes after a change: expired permits removed; both keys expire with the last permit, or
-- are deleted when none is left; `count`, when given, is stored as the permit count.
local function settle(permits_key, size_key, now, count)
  redis.call('ZREMRANGEBYSCORE', permits_key, '-inf', string.format('%d', now))
  local last = redis.call('ZRANGE', permits_key, -1, -1, 'WITHSCORES')[2]
  if not last then
    redis.call('DEL', permits_key, size_key)
    return
  end
  local ttl = tonumber(last) - now
  if count then
    redis.call('SET', size_key, count, 'PX', ttl)
  else
    redis.call('PEXPIRE', size_key, ttl)
  end
  redis.call('PEXPIRE', permits_key, ttl)
end
-- max(counter, mark) and the epoch ('' when absent) of the fence keys; nil and a CORRUPT
-- error reply (naming the key) when the counter or the mark is not a decimal integer in
-- 0..2^53, or the epoch is not a decimal integer. Read only.
local function fence_state(counter_key, mark_key, epoch_key)
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
-- Mints the next token as acquire.lua does: max(before, floor) + 1, floored by TIME in us
-- under scheme 'clock'; checked against 2^53 before anything is written; then stored in the
-- counter and the mark, and the epoch created when `epoch` is ''. `before`, `epoch`: what
-- fence_state read. Returns the token and the epoch, or nil and an error reply (nothing
-- written). Shared by permit_acquire.lua, fair_acquire.lua and rw_acquire.lua.
local function mint(counter_key, mark_key, epoch_key, scheme, floor_arg, before, epoch)
  local floor = canon(floor_arg)
  if not floor then return nil, redis.error_reply(NOT_AN_INTEGER) end
  local base = before
  if less(base, floor) then base = floor end
  if not less(base, MAX_TOKEN) then
    return nil, redis.error_reply('TOKEN_EXHAUSTED the fence counter ' .. counter_key .. ' would pass 2^53')
  end
  local next = tonumber(base) + 1
  local us
  if scheme == 'clock' or epoch == '' then
    local t = redis.call('TIME')
    us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  if scheme == 'clock' and next < us then next = us end
  if next > 9007199254740992 then
    return nil, redis.error_reply('TOKEN_EXHAUSTED the fence counter ' .. counter_key .. ' would pass 2^53')
  end
  local token = string.format('%d', next)
  redis.call('SET', counter_key, token)
  redis.call('SET', mark_key, token)
  if epoch == '' then
    epoch = string.format('%d', us)
    redis.call('SET', epoch_key, epoch)
  end
  return token, epoch
end
