--[[ raise.lua: raise the fence counter and mark to a token, where the lease is still ours.

Used by the fenced Redlock quorum's second round: the token of an acquisition is the maximum
minted by the quorum's nodes, and every node must then know it.

KEYS[1..n]  lock keys (n = ARGV[3])
KEYS[n+1]   fence counter key
KEYS[n+2]   applied-mark key
ARGV[1]     owner
ARGV[2]     token (decimal, >= 1)
ARGV[3]     n, the number of lock keys

If every lock key holds ARGV[1]: counter = max(counter, token) and mark = max(mark, token),
both stored as decimal strings (the client's canonical token text); otherwise nothing changes.

Returns
  1   every key is ours; counter and mark are now at least the token
  0   not held by ARGV[1]; nothing changed
Errors (nothing changed)
  ERR malformed raise  n is not in 1..999999 or #KEYS is not n + 2
  ERR ...        the token is not a decimal integer in 1..2^53
  CORRUPT <key>  the counter or the mark is not a decimal integer in 0..2^53
  WRONGTYPE ...  a key holds a value that is not a string
]]
local owner = ARGV[1]
local n = string.match(ARGV[3] or '', '^[1-9]%d?%d?%d?%d?%d?$') and tonumber(ARGV[3])
if not n or #KEYS ~= n + 2 then return redis.error_reply('ERR malformed raise') end
for i = 1, n do
  local v = redis.call('GET', KEYS[i])
  if not v or owner_of(v) ~= owner then return 0 end
end
local token = canon(ARGV[2])
if not token or token == '0' or less(MAX_TOKEN, token) then
  return redis.error_reply('ERR fencing token must be a decimal integer in 1..2^53')
end
local counter_key, mark_key = KEYS[n + 1], KEYS[n + 2]
local counter = read_token(counter_key)
if not counter then return corrupt(counter_key, NOT_A_TOKEN .. ' (the fence counter)') end
local mark = read_token(mark_key)
if not mark then return corrupt(mark_key, NOT_A_TOKEN .. ' (the applied mark)') end
if less(counter, token) then redis.call('SET', counter_key, token) end
if less(mark, token) then redis.call('SET', mark_key, token) end
return 1
