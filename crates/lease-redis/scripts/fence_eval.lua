--[[ fence_eval.lua: run a caller's Lua body iff the fencing token passes the fence.

One fixed script for every body: the body travels as the last argument and is compiled on the
server with loadstring, so the server's script cache holds this one script however many
distinct bodies run (bodies never grow it), and the client caches nothing per body.

The body is a chunk of its own: it sees KEYS, ARGV, redis and the other globals Redis gives a
script, but none of this script's locals (the guard's mark_key, mark and token, the prelude's
helpers). Assigning one of those names, even without `local`, creates a global, which Redis
refuses (the body fails, the mark is unmoved); changing KEYS[1] or ARGV[1] changes nothing the
fence writes (the guard read them before the body ran). Precompiled bytecode is refused by the
server.

KEYS[1]       applied-mark key (reserved)
KEYS[2..]     the body's keys
ARGV[1]       fencing token (decimal; reserved)
ARGV[2..n-1]  the body's arguments
ARGV[n]       the body (Lua source); removed from ARGV before the body runs, so the body sees
              its arguments at ARGV[2..] and #ARGV counts them and the token only

The body runs once (under pcall): it may return a value, which is discarded. A body that does
not compile, raises an error (redis.call failing, error(...)) or returns an error reply
(redis.error_reply(...)) leaves the mark as it was before the body ran, restored if the body
wrote the mark key itself; the error is returned (prefixed 'ERR ' when it has no error code).
Writes the body made to other keys before failing stay applied (Lua has no rollback): validate
before writing. A body that succeeds is followed by the mark advance, which overwrites whatever
the body did to the mark key.

Returns 1 once the body has run without error (fence_advance.lua), or {0, mark} when the
guard refuses the token (fence_guard.lua). Errors (mark unmoved): the guard's,
  ERR fenced body does not compile: ...
  ERR fence_eval takes a body                    (no body argument)
and whatever the body raised or returned as an error.
]]
if #ARGV < 2 then return redis.error_reply('ERR fence_eval takes a body') end
local body_source = table.remove(ARGV)
local body, compile_error = loadstring(body_source, '=fenced_body')
if not body then
  return redis.error_reply('ERR fenced body does not compile: ' .. string.gsub(compile_error, '[%c]', ' '))
end
local mark_before = redis.call('GET', mark_key)
local ran, result = pcall(body)
local failure
if not ran then
  failure = result
elseif type(result) == 'table' and result.err then
  failure = result
end
if failure ~= nil then
  if type(failure) == 'table' then failure = failure.err end
  if type(failure) ~= 'string' then failure = 'fenced body failed' end
  local now = redis.pcall('GET', mark_key)
  if now ~= mark_before then
    if mark_before then
      redis.call('SET', mark_key, mark_before)
    else
      redis.call('DEL', mark_key)
    end
  end
  failure = string.gsub(failure, '[%c]', ' ')
  if not string.match(failure, '^%u[%u_]*[ ]') then failure = 'ERR ' .. failure end
  return redis.error_reply(failure)
end
