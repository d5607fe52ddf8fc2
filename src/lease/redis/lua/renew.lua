-- Renew: KEYS[1] lease; ARGV[1] ownership token, ARGV[2] ttl ms.
-- Returns {1} when still ours (expiry pushed to now + ttl), else held_by's reply.
local lease, holder = held_by(KEYS[1])
if lease and lease.owner == redis.sha1hex(ARGV[1]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1}
end
return holder
