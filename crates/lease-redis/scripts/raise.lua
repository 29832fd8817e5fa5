--[[ raise.lua: raise the fence counter and mark to a token, where the lease is still ours.

Used by the fenced Redlock quorum's second round: the token of an acquisition is the maximum
minted by the quorum's nodes, and every node must then know it.

KEYS[1..n]  lock keys (n = ARGV[3])
KEYS[n+1]   fence counter key
KEYS[n+2]   applied-mark key
ARGV[1]     owner
ARGV[2]     token (decimal, >= 1)
ARGV[3]     n, the number of lock keys

If every lock key holds ARGV[1]: counter = max(counter, token) and mark = max(mark, token),
both stored as decimal strings (the client's canonical token text); otherwise nothing changes.

Returns
  1   every key is ours; counter and mark are now at least the token
  0   not held by ARGV[1]; nothing changed
Errors (nothing changed)
  ERR ...        the token, the counter or the mark is not a decimal integer
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

local owner = ARGV[1]
local n = tonumber(ARGV[3])
for i = 1, n do
  local v = redis.call('GET', KEYS[i])
  if not v or owner_of(v) ~= owner then return 0 end
end
local token = canon(ARGV[2])
if not token or token == '0' or less(MAX_TOKEN, token) then
  return redis.error_reply('ERR fencing token must be a decimal integer in 1..2^53')
end
local counter_key, mark_key = KEYS[n + 1], KEYS[n + 2]
local counter, mark = read_int(counter_key), read_int(mark_key)
if not counter or not mark then return redis.error_reply(NOT_AN_INTEGER) end
if less(counter, token) then redis.call('SET', counter_key, token) end
if less(mark, token) then redis.call('SET', mark_key, token) end
return 1
