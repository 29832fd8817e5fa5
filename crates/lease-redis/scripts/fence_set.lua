--[[ fence_set.lua: SET a key iff the fencing token passes the fence.

KEYS[1]  applied-mark key
KEYS[2]  target key
ARGV[1]  fencing token (decimal)
ARGV[2]  value

The guard refuses a token that is not a decimal integer in 1..2^53 (0 means "not leader") or
that is below the mark stored at KEYS[1]; an equal token passes (one term writes many times).
The write goes through redis.call, so a failing write (WRONGTYPE, ...) raises and aborts the
script before the mark moves (Lua has no rollback). The mark is advanced after the write, to the
canonical decimal text of ARGV[1] (never a Lua number formatted).

Returns
  1            applied; the mark is now the token
  {0, mark}    refused (stale or invalid token): nothing written; mark as decimal text
               ('0' when there is none)
Errors (mark unmoved)
  ERR ...  the mark is not a decimal integer
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
redis.call('SET', KEYS[2], ARGV[2])
redis.call('SET', KEYS[1], token)
return 1
