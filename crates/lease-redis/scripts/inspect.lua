--[[ inspect.lua: who holds a lease, and its fence counter and mark (read only, unless ARGV[1]
is 'w').

KEYS[1]  the first lock key
KEYS[2]  fence counter key (optional, with KEYS[3] and KEYS[4])
KEYS[3]  applied-mark key  (optional)
KEYS[4]  fence-epoch key   (optional)
ARGV[1]  'w' (optional, an observer's read): give a held string value the waiter mark
         (prelude.lua) with redis.pcall, so that its release publishes; a refused write (a
         read-only user or replica) is ignored. Nothing else is ever written.

Returns {has_value, value, pttl, has_counter, counter, has_mark, mark, epoch}
  has_value    1 if KEYS[1] exists, else 0 (then value = '' and pttl = -2); when it holds a
               read-write lock's readers, the reader whose hold expires first (its owner
               and remaining ms), 0 when none is current
  value        the raw stored value (owner, or owner .. "\0" .. metadata, either perhaps with
               the waiter mark)
  pttl         PTTL of KEYS[1] in ms (-1: no expiry)
  has_counter  1 if KEYS[2] exists, else 0; counter is its raw value ('' if absent)
  has_mark     1 if KEYS[3] exists, else 0; mark is its raw value ('' if absent)
  epoch        the raw value of KEYS[4] ('' if absent or not given)
Raw values are returned as stored, once checked: a counter or mark that is not a decimal
integer in 0..2^53, or an epoch that is not a decimal integer, is refused by name.
Errors
  WRONGTYPE ...  a key holds a value that is neither a string nor a sorted set, or a fence key not a string
  CORRUPT <key>  the counter, the mark or the epoch holds a value it must not
]]
local out = {0, '', -2, 0, '', 0, '', ''}
local v, readers = lock_get(KEYS[1])
if v then
  out[1], out[2], out[3] = 1, v, redis.call('PTTL', KEYS[1])
  if ARGV[1] == 'w' and not marked(v) then
    redis.pcall('SET', KEYS[1], with_mark(v), 'KEEPTTL')
  end
elseif readers then
  local t = redis.call('TIME')
  local ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local owner, expiry = first_reader(KEYS[1], ms)
  if owner then out[1], out[2], out[3] = 1, owner, tonumber(expiry) - ms end
end
if #KEYS >= 3 then
  local c = redis.call('GET', KEYS[2])
  if c then
    if not read_token(KEYS[2]) then return corrupt(KEYS[2], NOT_A_TOKEN .. ' (the fence counter)') end
    out[4], out[5] = 1, c
  end
  local m = redis.call('GET', KEYS[3])
  if m then
    if not read_token(KEYS[3]) then return corrupt(KEYS[3], NOT_A_TOKEN .. ' (the applied mark)') end
    out[6], out[7] = 1, m
  end
  out[8] = redis.call('GET', KEYS[4]) or ''
  if out[8] ~= '' and not canon(out[8]) then
    return corrupt(KEYS[4], 'is not a decimal integer (the fence epoch, in us)')
  end
end
return out
