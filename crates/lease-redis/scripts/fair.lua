--[[ fair.lua: the helpers every fair_*.lua script uses, after prelude.lua and semaphore.lua.

src/backend/fair.rs composes each fair script as prelude.lua, semaphore.lua (now_ms,
fence_state, mint), this file, then the script's own file. A fair lock F is KEYS[1] = F (the
lock: the holder's stored value with a TTL, as a plain lock's key), KEYS[2] = F:queue (a
list: waiters in arrival order) and KEYS[3] = F:places (a sorted set: owner -> expiry of its
place in ms of the server's clock). The rule is lease-core's fair module; the in-memory
backend is its executable spec. This file is never sent on its own; it returns nothing.
]]
-- The fair lock as read at `now` (nothing written): the holder's owner (nil when free), the
-- live places (owner -> expiry) and the expired owners, the queue without the expired
-- owners and then without the entries that have no place at its front (`orphans` of them),
-- and the queue's first entry as stored. A key of another type raises WRONGTYPE.
local function read_fair(now)
  local value = redis.call('GET', KEYS[1])
  local stored = redis.call('LRANGE', KEYS[2], 0, -1)
  local flat = redis.call('ZRANGE', KEYS[3], 0, -1, 'WITHSCORES')
  local f = {places = {}, expired = {}, queue = {}, orphans = 0, first = stored[1]}
  if value then f.holder = owner_of(value) end
  local dead = {}
  for i = 1, #flat, 2 do
    local e = tonumber(flat[i + 1])
    if e > now then
      f.places[flat[i]] = e
    else
      f.expired[#f.expired + 1] = flat[i]
      dead[flat[i]] = true
    end
  end
  for _, o in ipairs(stored) do
    if not dead[o] then f.queue[#f.queue + 1] = o end
  end
  while f.queue[1] and not f.places[f.queue[1]] do
    table.remove(f.queue, 1)
    f.orphans = f.orphans + 1
  end
  return f
end
-- Writes what read_fair dropped: the expired places and their queue entries, then the
-- orphans at the queue's front.
local function write_prune(f, now)
  if #f.expired > 0 then
    redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', string.format('%d', now))
    for _, o in ipairs(f.expired) do redis.call('LREM', KEYS[2], 0, o) end
  end
  for _ = 1, f.orphans do redis.call('LPOP', KEYS[2]) end
end
-- Removes `owner` from the queue and the places; whether it had a place.
local function remove(f, owner)
  local had = f.places[owner] ~= nil
  redis.call('LREM', KEYS[2], 0, owner)
  redis.call('ZREM', KEYS[3], owner)
  f.places[owner] = nil
  local q = {}
  for _, o in ipairs(f.queue) do
    if o ~= owner then q[#q + 1] = o end
  end
  f.queue = q
  return had
end
-- The queue and places keys expire with the last place; both are deleted when nobody waits.
local function settle(f, now)
  if #f.queue == 0 then
    redis.call('DEL', KEYS[2], KEYS[3])
    return
  end
  local last = now
  for _, e in pairs(f.places) do
    if e > last then last = e end
  end
  redis.call('PEXPIRE', KEYS[2], last - now)
  redis.call('PEXPIRE', KEYS[3], last - now)
end
-- Wakes the head of a free lock, alone, on its own channel (`notice` .. owner: 'p:' PUBLISH
-- or 's:' SPUBLISH, '' none), when the lock was just released or the head is not the one
-- stored before this script; never `except`. With redis.pcall: a refused publish costs the
-- head its wake (it still heartbeats), never the operation.
local function wake(f, released, notice, except)
  if f.holder or notice == '' then return end
  local head = f.queue[1]
  if not head or head == except then return end
  if released or f.first ~= head then
    local verb = 'PUBLISH'
    if string.sub(notice, 1, 1) == 's' then verb = 'SPUBLISH' end
    redis.pcall(verb, string.sub(notice, 3) .. head, head)
  end
end
