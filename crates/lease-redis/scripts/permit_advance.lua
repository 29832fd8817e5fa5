--[[ permit_advance.lua: the end of every permit-fenced write, after its write (instead of
fence_advance.lua).

The owner's mark (the guard's mark_key) is set to the token the guard read, as
fence_advance.lua sets a lease's mark, and expires after permit_pttl ms (permit_guard.lua):
with the semaphore's permits key, never before the writer's permit. So the marks of owners
that stop writing do not accumulate.

Returns
  1   applied; the owner's mark is now the token
]]
redis.call('SET', mark_key, token, 'PX', string.format('%d', permit_pttl))
return 1
