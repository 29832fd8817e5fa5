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

Returns 1 once every write is applied (fence_advance.lua), or {0, mark} when the guard
refuses the token (fence_guard.lua). Errors (nothing written, mark unmoved): the guard's, and
  WRONGTYPE ...  an HSET target holds a value that is not a hash
  ERR ...        a malformed batch
]]
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
