--[[ inspect.lua: who holds a lease, and its fence counter and mark (read only).

KEYS[1]  the first lock key
KEYS[2]  fence counter key (optional, with KEYS[3])
KEYS[3]  applied-mark key  (optional, with KEYS[2])
ARGV     none

Returns {has_value, value, pttl, has_counter, counter, has_mark, mark}
  has_value    1 if KEYS[1] exists, else 0 (then value = '' and pttl = -2)
  value        the raw stored value (owner, or owner .. "\0" .. metadata)
  pttl         PTTL of KEYS[1] in ms (-1: no expiry)
  has_counter  1 if KEYS[2] exists, else 0; counter is its raw value ('' if absent)
  has_mark     1 if KEYS[3] exists, else 0; mark is its raw value ('' if absent)
Raw values are returned unparsed; the client validates them.
Errors
  WRONGTYPE ...  a key holds a value that is not a string
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

local out = {0, '', -2, 0, '', 0, ''}
local v = redis.call('GET', KEYS[1])
if v then
  out[1], out[2], out[3] = 1, v, redis.call('PTTL', KEYS[1])
end
if #KEYS >= 3 then
  local c = redis.call('GET', KEYS[2])
  if c then out[4], out[5] = 1, c end
  local m = redis.call('GET', KEYS[3])
  if m then out[6], out[7] = 1, m end
end
return out
