-- Renew: KEYS[1] lease, KEYS[2] term record; ARGV[1] ownership token,
-- ARGV[2] ttl ms. Returns {1} when still ours (expiry pushed to now + ttl,
-- the term record's with it), else held_by's reply.
local lease, holder = held_by(KEYS[1])
if lease and lease.owner == redis.sha1hex(ARGV[1]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  return {1}
end
return holder
