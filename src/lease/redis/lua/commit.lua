-- Commit (Redlock, phase two): KEYS[1] lease, KEYS[2] token counter,
-- KEYS[3] term record;
-- ARGV[1] ownership token, ARGV[2] holder id as a JSON string, ARGV[3] the
-- fencing token chosen over all nodes (at least this node's proposal).
-- If the lease is still ours, it carries that token from now on (its expiry
-- unchanged) and the counter is raised to at least it, so any later majority,
-- which shares a node with this one, proposes more. Returns {1, token} when
-- committed, else held_by's reply.
local lease, holder = held_by(KEYS[1])
if not (lease and lease.owner == redis.sha1hex(ARGV[1])) then
  return holder
end
local pttl = redis.call('PTTL', KEYS[1])
if pttl <= 0 then
  return {0, false, false, -2}
end
local fencing = tonumber(ARGV[3])
local last = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
if last < fencing then
  redis.call('SET', KEYS[2], string.format('%d', fencing))
end
local value = '{"id":' .. ARGV[2] .. ',"fencing_token":' .. string.format('%d', fencing) .. ',"owner":"' .. redis.sha1hex(ARGV[1]) .. '"}'
redis.call('SET', KEYS[1], value, 'PX', pttl)
write_term(KEYS[3], value, pttl)
return {1, fencing}
