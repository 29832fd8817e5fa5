--[[ fence_guard.lua: the fence check every fence_* script runs first, right after the prelude.

KEYS[1]  applied-mark key
ARGV[1]  fencing token (decimal)

Refuses a token that is not a decimal integer in 1..2^53 (0 means "not leader") or that is
below the mark stored at KEYS[1]; an equal token passes (one term writes many times). Leaves
`mark_key`, `mark` and `token` (both canonical decimal text) in scope for the write that
follows; they are read here, before any caller-supplied code runs, and fence_advance.lua
writes from them (never from KEYS or ARGV, which a fenced body could change).

Returns (only when the script stops here)
  {0, mark}    refused (stale or invalid token): nothing written; mark as decimal text
               ('0' when there is none)
Errors (nothing written, mark unmoved)
  CORRUPT <key> ...  the mark is not a decimal integer in 0..2^53
]]
-- guard: refuse a token that is not in 1..2^53, or below the mark (equal passes).
local mark_key = KEYS[1]
local mark = read_token(mark_key)
if not mark then return corrupt(mark_key, NOT_A_TOKEN .. ' (the applied mark)') end
local token = canon(ARGV[1])
if not token or token == '0' or less(MAX_TOKEN, token) or less(token, mark) then
  return {0, mark}
end
