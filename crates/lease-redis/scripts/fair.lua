--[[ fair.lua: the helpers every fair_*.lua script uses, after prelude.lua and semaphore.lua.

src/backend/fair.rs composes each fair script as prelude.lua, semaphore.lua (now_ms,
fence_state, mint), this file, then the script's own file. A fair lock F is KEYS[1] = F (the
lock: the holder's stored value with a TTL, as a plain lock's key), KEYS[2] = F:queue (a
sorted set: owner -> arrival sequence, so ZRANGE 0 0 is the first in line) and KEYS[3] =
F:places (a sorted set: owner -> expiry of its place in ms of the server's clock). Both hold
the same owners. The rule is lease-core's fair module; the in-memory backend is its
executable spec. This file is never sent on its own; it returns nothing.

Every call costs O(log n) in the queue's length n: no call reads the whole queue. A call
drops at most FAIR_PRUNE entries (the expired places, earliest expiry first, then the dead
entries at the queue's front); what it cannot drop, later calls do.
]]
local FAIR_PRUNE = 64 -- entries one call drops at most
local FAIR_MAX = 10000 -- live waiters at most: a new one past it is refused
local FAIR_SHOWN = 32 -- live waiters an inspection lists at most
local FAIR_SCAN = 128 -- queue entries an inspection reads at most
-- The fair lock as read at `now` (nothing written): the holder's owner (nil when free); the
-- owners to drop (`dead`, a set, and `drop`, a list: at most FAIR_PRUNE of them), the expired
-- places earliest first, then the front entries without a live place; the head (`head`: the
-- first entry with a live place, `skip` aside, which is being removed), or `blocked` when the
-- budget ran out before one was found; and the queue's first entry as stored (`first`). A key
-- of another type raises WRONGTYPE.
local function read_fair(now, skip)
  local value = redis.call('GET', KEYS[1])
  local f = {dead = {}, drop = {}}
  if value then f.holder = owner_of(value) end
  local expired = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', string.format('%d', now),
    'LIMIT', 0, FAIR_PRUNE)
  for _, o in ipairs(expired) do
    f.dead[o] = true
    f.drop[#f.drop + 1] = o
  end
  local i = 0
  while true do
    local chunk = redis.call('ZRANGE', KEYS[2], i, i + 3)
    if i == 0 then f.first = chunk[1] end
    for _, o in ipairs(chunk) do
      if not f.dead[o] and o ~= skip then
        local e = redis.call('ZSCORE', KEYS[3], o)
        if e and tonumber(e) > now then
          f.head = o
          return f
        end
        if #f.drop >= FAIR_PRUNE then
          f.blocked = true
          return f
        end
        f.dead[o] = true
        f.drop[#f.drop + 1] = o
      end
    end
    if #chunk < 4 then return f end
    i = i + 4
  end
end
-- Whether `owner` has a live place (read only).
local function has_place(f, owner, now)
  if f.dead[owner] then return false end
  local e = redis.call('ZSCORE', KEYS[3], owner)
  return e ~= false and e ~= nil and tonumber(e) > now
end
-- The live places (read only).
local function live_count(now)
  return redis.call('ZCOUNT', KEYS[3], '(' .. string.format('%d', now), '+inf')
end
-- Writes what read_fair dropped.
local function write_prune(f)
  if #f.drop > 0 then
    redis.call('ZREM', KEYS[2], unpack(f.drop))
    redis.call('ZREM', KEYS[3], unpack(f.drop))
  end
end
-- Removes `owner` from the queue and the places.
local function remove(owner)
  redis.call('ZREM', KEYS[2], owner)
  redis.call('ZREM', KEYS[3], owner)
end
-- Queues `owner` at the back.
local function enqueue(owner)
  local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')[2]
  local seq = 1
  if last then seq = tonumber(last) + 1 end
  redis.call('ZADD', KEYS[2], string.format('%d', seq), owner)
end
-- The queue and places keys expire with the last place; both are deleted when nobody waits.
local function settle(now)
  local last = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')[2]
  if redis.call('ZCARD', KEYS[2]) == 0 or not last or tonumber(last) <= now then
    redis.call('DEL', KEYS[2], KEYS[3])
    return
  end
  redis.call('PEXPIRE', KEYS[2], tonumber(last) - now)
  redis.call('PEXPIRE', KEYS[3], tonumber(last) - now)
end
-- Wakes the head of a free lock, alone, on its own channel (`notice` .. owner: 'p:' PUBLISH
-- or 's:' SPUBLISH, '' none), when the lock was just released or the head is not the one
-- stored before this script; never `except`. With redis.pcall: a refused publish costs the
-- head its wake (it still heartbeats), never the operation.
local function wake(f, released, notice, except)
  if f.holder or notice == '' then return end
  local head = f.head
  if not head or head == except then return end
  if released or f.first ~= head then
    local verb = 'PUBLISH'
    if string.sub(notice, 1, 1) == 's' then verb = 'SPUBLISH' end
    redis.pcall(verb, string.sub(notice, 3) .. head, head)
  end
end
