--[[ release.lua: compare-and-delete the keys of a lease this owner holds, then tell waiters.

KEYS[1..n]  lock keys (n = ARGV[2])
KEYS[n+1]   fence counter key (only when a term is checked)
ARGV[1]     owner
ARGV[2]     n, the number of lock keys
ARGV[3]     release notice: '' (none), 'p:<channel>' (PUBLISH) or 's:<channel>' (SPUBLISH,
            Redis Cluster: the channel is in the keys' slot)
ARGV[4]     term: the token of the term being released (only when KEYS[n+1] is given)

When a term is checked and the counter differs from it (a later term of the same owner, or a
counter that was lost), nothing changes. Otherwise every key whose owner part equals ARGV[1]
is deleted; keys held by anyone else (a read-write lock's readers too) are left alone. When a
deleted key's value carried the waiter mark (prelude.lua: an attempt found it held), the owner
is published on the notice channel with redis.pcall: a refused publish (an ACL without the
channel) costs the waiters their notice, never the release.

Returns
  1   every key was ours and is deleted
  0   not (entirely) ours: only our keys were deleted, or nothing when the term moved on
Errors
  ERR malformed release  n is not in 1..999999, #KEYS is neither n nor n + 1, or no term
  CORRUPT <key>  the counter is not a decimal integer in 0..2^53; nothing changed
  WRONGTYPE ...  a key holds a value that is neither a string nor a sorted set
]]
local owner = ARGV[1]
local n = string.match(ARGV[2] or '', '^[1-9]%d?%d?%d?%d?%d?$') and tonumber(ARGV[2])
if not n or (#KEYS ~= n and #KEYS ~= n + 1) or (#KEYS == n + 1 and not ARGV[4]) then
  return redis.error_reply('ERR malformed release')
end
if #KEYS == n + 1 then
  local counter = read_token(KEYS[n + 1])
  if not counter then return corrupt(KEYS[n + 1], NOT_A_TOKEN .. ' (the fence counter)') end
  if counter ~= canon(ARGV[4]) then return 0 end
end
local all, wake = 1, false
for i = 1, n do
  local v = lock_get(KEYS[i])
  if v and owner_of(v) == owner then
    redis.call('DEL', KEYS[i])
    wake = wake or marked(v)
  else
    all = 0
  end
end
local notice = ARGV[3] or ''
if wake and notice ~= '' then
  local verb = 'PUBLISH'
  if string.sub(notice, 1, 1) == 's' then verb = 'SPUBLISH' end
  redis.pcall(verb, string.sub(notice, 3), owner)
end
return all
