--[[ prelude.lua: the helpers every script uses, defined once.

src/scripts.rs composes each script at compile time as this prelude followed by the script's
own file (and, for the fence_* scripts, fence_guard.lua before it and fence_advance.lua after
it), so the helpers below are in scope for every part that follows. This file is never sent on
its own; it returns nothing.
]]
-- The owner part of a stored lock value: the text before the first NUL byte.
local function owner_of(v)
  local i = string.find(v, '\0', 1, true)
  if i then return string.sub(v, 1, i - 1) end
  return v
end
-- The waiter mark. An attempt that finds a lock held appends the flag 'w' to the holder's
-- value (after a second NUL: 'owner\0\0w' or 'owner\0metadata\0w'; the owner and the metadata
-- never contain NUL, see lease-core's split_stored), keeping its TTL; a release publishes its
-- notice only when the value it deletes carries the mark. The mark lives and expires with the
-- value, so no waiter that found this holder can miss its release's notice.
local function marked(v)
  local i = string.find(v, '\0', 1, true)
  return i ~= nil and string.find(v, '\0', i + 1, true) ~= nil
end
-- `v` with the waiter mark (unchanged when it has one).
local function with_mark(v)
  local i = string.find(v, '\0', 1, true)
  if not i then return v .. '\0\0w' end
  if not string.find(v, '\0', i + 1, true) then return v .. '\0w' end
  return v
end
-- Marks the lock value `v` held at `key` (one write, the first time only).
local function mark_waiting(key, v)
  if not marked(v) then redis.call('SET', key, with_mark(v), 'KEEPTTL') end
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
local NOT_AN_INTEGER = 'ERR value is not an integer or out of range'
local MAX_TOKEN = '9007199254740992' -- 2^53
-- The token stored at `key` (a fence counter or an applied mark) in canonical form, '0' when
-- absent, or nil when the value is not a decimal integer in 0..2^53 (nothing of ours ever
-- stores one above 2^53). A key of another type raises WRONGTYPE, which aborts the script.
local function read_token(key)
  local v = redis.call('GET', key)
  if not v then return '0' end
  local c = canon(v)
  if not c or less(MAX_TOKEN, c) then return nil end
  return c
end
-- `key` fit for an error reply: its first 200 bytes, every byte that is not printable ASCII,
-- and the space and the backslash, written as \xNN (so a reply never carries control bytes
-- and the name is one word); '...' marks a cut.
local function key_name(key)
  local s, cut = key, ''
  if #s > 200 then s, cut = string.sub(s, 1, 200), '...' end
  s = string.gsub(s, '[%z\1-\32\92\127-\255]', function(c)
    return string.format('\\x%02x', string.byte(c))
  end)
  return s .. cut
end
-- The typed refusal for a fence key holding what it must not: 'CORRUPT <key> <what>'.
-- Returned before anything is written; the client maps it to BackendError::Corrupt.
local function corrupt(key, what)
  return redis.error_reply('CORRUPT ' .. key_name(key) .. ' ' .. what)
end
local NOT_A_TOKEN = 'is not a decimal integer in 0..2^53'
-- `s` when it is a TTL in whole milliseconds in 1..2^53 written as plain digits, else nil.
-- Scripts check their TTLs before their first write, so a bad one changes nothing.
local function ttl_ms(s)
  if type(s) ~= 'string' or not string.match(s, '^[1-9]%d*$') or less(MAX_TOKEN, s) then
    return nil
  end
  return s
end
local BAD_TTL = 'ERR the TTL must be whole milliseconds in 1..2^53'
-- A read-write lock's readers live in the lock key itself, as a sorted set of owner -> expiry
-- in ms of the server's clock (see lease-core's rwlock module). WRITER_WAITING is the member
-- that says a writer waits (a NUL first: no owner contains one).
local WRITER_WAITING = '\0writer-waiting'
-- The string at lock key `key` (false when absent), and whether the key holds readers
-- instead (a sorted set: then the string is false). A key of any other type raises WRONGTYPE,
-- which aborts the script.
local function lock_get(key)
  local v = redis.pcall('GET', key)
  if type(v) ~= 'table' then return v, false end
  if redis.call('TYPE', key)['ok'] == 'zset' then return false, true end
  return redis.call('GET', key), false
end
-- The owner and expiry (ms) of the current reader at `key` whose hold expires first, or nil:
-- entries scored above `now` (ms), the writer's mark left out.
local function first_reader(key, now)
  local e = redis.call('ZRANGEBYSCORE', key, '(' .. string.format('%d', now), '+inf', 'WITHSCORES', 'LIMIT', 0, 2)
  if e[1] == WRITER_WAITING then return e[3], e[4] end
  return e[1], e[2]
end
