--[[ fence_eval.lua: run a caller's Lua body iff the fencing token passes the fence.

This file is a template: the client replaces the line holding only the body marker below
with the caller's body, and caches the resulting script per body.

KEYS[1]     applied-mark key (reserved)
KEYS[2..]   the body's keys
ARGV[1]     fencing token (decimal; reserved)
ARGV[2..]   the body's arguments

The body runs as a function: it may return a value, which is discarded. A body that raises an
error (redis.call failing, error(...)) or returns an error reply (redis.error_reply(...))
leaves the mark unmoved; the error is returned. Writes the body made before failing stay
applied (Lua has no rollback): validate before writing.

Returns 1 once the body has run without error (fence_advance.lua), or {0, mark} when the
guard refuses the token (fence_guard.lua). Errors (mark unmoved): the guard's, and whatever
the body raised or returned as an error.
]]
local fenced_body = function()
--@@BODY@@
end
local result = fenced_body()
if type(result) == 'table' and result.err then return result end
