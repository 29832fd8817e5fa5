--[[ fence_guard.lua: the fence check every fence_* script runs first, right after the prelude.

KEYS[1]  applied-mark key
ARGV[1]  fencing token (decimal)

Refuses a token that is not a decimal integer in 1..2^53 (0 means "not leader") or that is
below the mark stored at KEYS[1]; an equal token passes (one term writes many times). Leaves
`mark` and `token` (both canonical decimal text) in scope for the write that follows.

Returns (only when the script stops here)
  {0, mark}    refused (stale or invalid token): nothing written; mark as decimal text
               ('0' when there is none)
Errors (nothing written, mark unmoved)
  ERR ...  the mark is not a decimal integer
]]
-- guard: refuse a token that is not in 1..2^53, or below the mark (equal passes).
local mark = read_int(KEYS[1])
if not mark then return redis.error_reply(NOT_AN_INTEGER) end
local token = canon(ARGV[1])
if not token or token == '0' or less(MAX_TOKEN, token) or less(token, mark) then
  return {0, mark}
end
