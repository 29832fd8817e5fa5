--[[ fence_advance.lua: the end of every fence_* script, after its write.

The write went through redis.call, so a failing write (WRONGTYPE, ...) raised and aborted the
script before this point (Lua has no rollback). The mark is advanced to the canonical decimal
text of ARGV[1] (never a Lua number formatted), at the mark key and to the token the guard read
before anything else ran.

Returns
  1   applied; the mark is now the token
]]
redis.call('SET', mark_key, token)
return 1
