--[[ release_one.lua: release.lua's rule for the plain lock, one unfenced key, and nothing else.

KEYS[1]  the lock key
ARGV[1]  owner
ARGV[2]  release notice: '' (none), 'p:<channel>' (PUBLISH) or 's:<channel>' (SPUBLISH);
         absent: PUBLISH on 'redlease:released:' .. KEYS[1], the standalone default (one
         argument fewer: measured on Redis 7.0, a second argument is 0.1 us of the call's 1.5)
ARGV[3]  only for a hand-off within a process: the releaser's value as it stored it (owner,
         or owner NUL metadata; never marked)
ARGV[4]  only for a hand-off: the receiver's value
ARGV[5]  only for a hand-off: the receiver's TTL in whole milliseconds

The one script that does not start with prelude.lua: the release of an unfenced single-key
lock is the hot path of every lock cycle on a server without a native compare-and-delete, and
defining the prelude's helpers on every call was most of its server time (measured on Redis
7.0: 5.2 us per call with the prelude and release.lua's key count, term and notice parsing,
3.5 us without; a bare compare-and-delete 3.0 us). It does what release.lua does for n = 1
and no term: delete the key when its owner part (the text before the first NUL) is ARGV[1],
then, when the value carried the waiter mark (a second NUL: an attempt found the lock held,
see prelude.lua), publish the owner with redis.pcall (a refused publish costs the waiters
their notice, never the release). An uncontended release publishes nothing.

A hand-off first: when the key holds exactly ARGV[3] (ours, and unmarked: no attempt at the
store found it held, so only the releaser's process knows of waiters), it is set to ARGV[4] with PX ARGV[5] in the same
step, and nothing is published (the receiver is the waiter). Otherwise the release below.

Returns
  2   a hand-off: the key now holds ARGV[4] (only when ARGV[3] is given)
  1   the key was ours and is deleted
  0   not ours (absent, another owner's, or a read-write lock's readers); nothing changed
Errors
  WRONGTYPE ...  the key holds a value that is neither a string nor a sorted set
]]
local v = redis.pcall('GET', KEYS[1])
if ARGV[3] and v == ARGV[3] then
  redis.call('SET', KEYS[1], ARGV[4], 'PX', ARGV[5])
  return 2
end
-- The common case first: a value that is exactly the owner (no metadata, no mark).
if v == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
if type(v) == 'table' then
  -- A read-write lock's readers (a sorted set) are not ours; any other type is WRONGTYPE.
  if redis.call('TYPE', KEYS[1])['ok'] == 'zset' then return 0 end
  return v
end
if not v then return 0 end
local nul = string.find(v, '\0', 1, true)
local marked = nul and string.find(v, '\0', nul + 1, true)
if nul then v = string.sub(v, 1, nul - 1) end
if v ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
local notice = ARGV[2] or ('p:redlease:released:' .. KEYS[1])
if marked and notice ~= '' then
  local verb = 'PUBLISH'
  if string.sub(notice, 1, 1) == 's' then verb = 'SPUBLISH' end
  redis.pcall(verb, string.sub(notice, 3), ARGV[1])
end
return 1
