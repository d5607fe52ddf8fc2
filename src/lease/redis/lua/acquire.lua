-- Acquire: KEYS[1] lease, KEYS[2] token counter, KEYS[3] term record,
-- KEYS[4] the last released term's token.
-- ARGV[1] ownership token, ARGV[2] holder id as a JSON string, ARGV[3] ttl ms,
-- ARGV[4] the highest fencing token this candidate has seen.
-- Returns {1, fencing_token} when the lease is ours, else held_by's reply.
-- A lease already ours (an earlier, timed-out attempt with the same token
-- won, or the caller stepped down and could not release) is taken again as
-- a new term: every acquisition gets a larger token.
-- A missing lease is taken only when the vacancy rule frees it (see
-- vacancy): its holder may still be working until it notices.
local lease, holder = held_by(KEYS[1])
local ours = lease and lease.owner == redis.sha1hex(ARGV[1])
if not ours then
  if holder[4] ~= -2 then
    return holder
  end
  local held = vacancy(KEYS[3], KEYS[2], KEYS[4], tonumber(ARGV[3]), true)
  if held then
    return held
  end
end
-- Strictly above the counter, above anything the caller has seen, and above
-- the server's clock in ms: the last two keep tokens growing after Redis
-- restarts without persistence and forgets the counter.
local last = tonumber(redis.call('GET', KEYS[2]) or '0')
if not last then
  return redis.error_reply('leaderd: ' .. KEYS[2] .. ' does not hold a number; delete it or choose another key')
end
local fencing = math.max(last + 1, tonumber(ARGV[4]) + 1, now_ms())
redis.call('SET', KEYS[2], string.format('%d', fencing))
-- The value names the holder and its token for a plain GET, but keeps only a
-- hash of the ownership token: reading Redis is not enough to renew or
-- release someone else's lease.
local value = '{"id":' .. ARGV[2] .. ',"fencing_token":' .. string.format('%d', fencing) .. ',"owner":"' .. redis.sha1hex(ARGV[1]) .. '"}'
redis.call('SET', KEYS[1], value, 'PX', ARGV[3])
write_term(KEYS[3], value, tonumber(ARGV[3]))
return {1, fencing}
