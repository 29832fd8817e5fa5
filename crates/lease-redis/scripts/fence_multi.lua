--[[ fence_multi.lua: several writes under one fence check, all or nothing.

KEYS[1]     applied-mark key
KEYS[2..]   the writes' keys, in order (each write takes its nkeys)
ARGV[1]     fencing token (decimal)
ARGV[2]     m, the number of writes
ARGV[3..]   m writes, each: kind, nkeys, then its arguments:
              'set'   nkeys = 1, then value
              'hset'  nkeys = 1, then field, value
              'del'   nkeys >= 0, no arguments

Every write is decoded and type-checked before any is applied (an HSET target must be a hash
or absent, taking earlier writes of the batch into account), so a batch is all or nothing;
then all are applied and the mark advanced.

The guard refuses a token that is not a decimal integer in 1..2^53 (0 means "not leader") or
that is below the mark stored at KEYS[1]; an equal token passes (one term writes many times).
The write goes through redis.call, so a failing write (WRONGTYPE, ...) raises and aborts the
script before the mark moves (Lua has no rollback). The mark is advanced after the write, to the
canonical decimal text of ARGV[1] (never a Lua number formatted).

Returns
  1            applied; the mark is now the token
  {0, mark}    refused (stale or invalid token): nothing written; mark as decimal text
               ('0' when there is none)
Errors (nothing written, mark unmoved)
  WRONGTYPE ...  an HSET target holds a value that is not a hash
  ERR ...        the mark is not a decimal integer, or a malformed batch
]]
-- helpers:begin (identical in every script; a unit test checks it)
-- The owner part of a stored lock value: the text before the first NUL byte.
local function owner_of(v)
  local i = string.find(v, '\0', 1, true)
  if i then return string.sub(v, 1, i - 1) end
  return v
end
-- Whether canonical decimal integer a < b. Compared as text, never as Lua numbers (doubles,
-- exact only up to 2^53), so values of any size compare exactly.
local function less(a, b)
  if #a ~= #b then return #a < #b end
  for i = 1, #a do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return false
end
-- `s` in canonical form (no sign, no leading zeros), or nil unless `s` is a decimal integer
-- in 0..2^64-1, optionally with a leading '+' (the rule of Rust's u64 parser).
local function canon(s)
  if type(s) ~= 'string' then return nil end
  local d = string.match(s, '^%+?(%d+)$')
  if not d then return nil end
  d = string.match(d, '^0*(%d.*)$')
  if less('18446744073709551615', d) then return nil end
  return d
end
-- The canonical integer stored at `key`, '0' when absent, or nil when it is not an integer
-- (a key of another type raises WRONGTYPE, which aborts the script).
local function read_int(key)
  local v = redis.call('GET', key)
  if not v then return '0' end
  return canon(v)
end
local NOT_AN_INTEGER = 'ERR value is not an integer or out of range'
local MAX_TOKEN = '9007199254740992' -- 2^53
-- helpers:end

-- guard: refuse a token that is not in 1..2^53, or below the mark (equal passes).
local mark = read_int(KEYS[1])
if not mark then return redis.error_reply(NOT_AN_INTEGER) end
local token = canon(ARGV[1])
if not token or token == '0' or less(MAX_TOKEN, token) or less(token, mark) then
  return {0, mark}
end
local m = tonumber(ARGV[2])
if not m then return redis.error_reply('ERR malformed fenced batch') end
local ops = {}
local types = {} -- the type each key will have after the earlier writes of this batch
local ki, ai = 2, 3
for i = 1, m do
  local kind, nk = ARGV[ai], tonumber(ARGV[ai + 1])
  ai = ai + 2
  if not nk or nk < 0 or ki + nk - 1 > #KEYS then
    return redis.error_reply('ERR malformed fenced batch')
  end
  local op = {kind = kind, keys = {}, args = {}}
  for j = 1, nk do
    op.keys[j] = KEYS[ki]
    ki = ki + 1
  end
  if kind == 'set' and nk == 1 then
    op.args[1] = ARGV[ai]
    ai = ai + 1
    types[op.keys[1]] = 'string'
  elseif kind == 'hset' and nk == 1 then
    local k = op.keys[1]
    local t = types[k]
    if not t then t = redis.call('TYPE', k)['ok'] end
    if t ~= 'hash' and t ~= 'none' then
      return redis.error_reply('WRONGTYPE Operation against a key holding the wrong kind of value')
    end
    op.args[1], op.args[2] = ARGV[ai], ARGV[ai + 1]
    ai = ai + 2
    types[k] = 'hash'
  elseif kind == 'del' then
    for j = 1, nk do types[op.keys[j]] = 'none' end
  else
    return redis.error_reply('ERR malformed fenced batch')
  end
  if ai - 1 > #ARGV then return redis.error_reply('ERR malformed fenced batch') end
  ops[i] = op
end
if ki - 1 ~= #KEYS or ai - 1 ~= #ARGV then
  return redis.error_reply('ERR malformed fenced batch')
end

for i = 1, m do
  local op = ops[i]
  if op.kind == 'set' then
    redis.call('SET', op.keys[1], op.args[1])
  elseif op.kind == 'hset' then
    redis.call('HSET', op.keys[1], op.args[1], op.args[2])
  else
    for j = 1, #op.keys do redis.call('DEL', op.keys[j]) end
  end
end
redis.call('SET', KEYS[1], token)
return 1
