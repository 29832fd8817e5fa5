--[[ fence_advance.lua: the end of every fence_* script, after its write.

The write went through redis.call, so a failing write (WRONGTYPE, ...) raised and aborted the
script before this point (Lua has no rollback). The mark is advanced to the canonical decimal
text of ARGV[1] (never a Lua number formatted).

Returns
  1   applied; the mark is now the token
]]
redis.call('SET', KEYS[1], token)
return 1
