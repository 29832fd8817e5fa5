--[[ force_release.lua: an administrator's release: delete a lease whatever its owner and,
when fenced, fence its holder out.

KEYS[1..n]  lock keys (n = ARGV[1])
KEYS[n+1]   fence counter key (only when fenced, with the next two)
KEYS[n+2]   applied-mark key
KEYS[n+3]   fence-epoch key
ARGV[1]     n, the number of lock keys
ARGV[2]     release notice, as release.lua's ARGV[3]
ARGV[3]     only when fenced: the token scheme, 'clock' or 'counter'

Every lock key is read first (GET: a key that is not a string, a read-write lock's readers
among them, raises WRONGTYPE before anything changed). When fenced, a fresh token is minted
as acquire.lua mints one with no floor (max(counter, mark) + 1, under 'clock' at least TIME
in µs; the epoch created when absent) and stored in counter and mark, whether or not the lease
is held (a holder whose lease lapsed may still write): the holder's token is now below the
mark, so its fenced writes are refused, and the next acquire mints above the mark, so the
next holder's are accepted. Then every held key is deleted and, when a deleted value carried
the waiter mark, its owner is published as release.lua publishes it.

Returns {held, holder, token}
  held    1 if any lock key existed (all are deleted now), else 0
  holder  the owner part of the first existing key ('' when none)
  token   the minted token ('0' when unfenced)
Errors (nothing changed)
  ERR malformed force release  n is not in 1..999999 or #KEYS is neither n nor n + 3
  CORRUPT <key>       the counter or the mark is not a decimal integer in 0..2^53, or the
                      epoch is not a decimal integer
  TOKEN_EXHAUSTED ... the next token would exceed 2^53
  WRONGTYPE ...       a lock key is not a string, or a fence key not a string
]]
local n = string.match(ARGV[1] or '', '^[1-9]%d?%d?%d?%d?%d?$') and tonumber(ARGV[1])
if not n or (#KEYS ~= n and #KEYS ~= n + 3) then
  return redis.error_reply('ERR malformed force release')
end
local held, holder, wake = {}, '', nil
for i = 1, n do
  local v = redis.call('GET', KEYS[i])
  if v then
    if #held == 0 then holder = owner_of(v) end
    held[#held + 1] = KEYS[i]
    if not wake and marked(v) then wake = owner_of(v) end
  end
end
local token = '0'
if #KEYS == n + 3 then
  local ck, mk, ek = KEYS[n + 1], KEYS[n + 2], KEYS[n + 3]
  local counter = read_token(ck)
  if not counter then return corrupt(ck, NOT_A_TOKEN .. ' (the fence counter)') end
  local mark = read_token(mk)
  if not mark then return corrupt(mk, NOT_A_TOKEN .. ' (the applied mark)') end
  if less(counter, mark) then counter = mark end
  local epoch = redis.call('GET', ek) or ''
  if epoch ~= '' and not canon(epoch) then
    return corrupt(ek, 'is not a decimal integer (the fence epoch, in us)')
  end
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  -- counter < 2^53 here or it is exhausted; both it and TIME in µs are exact as Lua numbers.
  local next = tonumber(counter) + 1
  if ARGV[3] == 'clock' and next < now then next = now end
  if not less(counter, MAX_TOKEN) or next > 9007199254740992 then
    return redis.error_reply('TOKEN_EXHAUSTED the fence counter ' .. key_name(ck) .. ' would pass 2^53')
  end
  token = string.format('%d', next)
  redis.call('SET', ck, token)
  redis.call('SET', mk, token)
  if epoch == '' then redis.call('SET', ek, string.format('%d', now)) end
end
for _, k in ipairs(held) do redis.call('DEL', k) end
local notice = ARGV[2] or ''
if wake and notice ~= '' then
  local verb = 'PUBLISH'
  if string.sub(notice, 1, 1) == 's' then verb = 'SPUBLISH' end
  redis.pcall(verb, string.sub(notice, 3), wake)
end
if #held > 0 then return {1, holder, token} end
return {0, '', token}
