-- Release: KEYS[1] lease; ARGV[1] ownership token, ARGV[2] release channel.
-- Deletes the lease only if it is still ours and announces it in the same
-- atomic step, so waiters can try at once. Returns 1 if released, else 0.
local lease = held_by(KEYS[1])
if lease and lease.token == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[2], lease.id or '')
  return 1
end
return 0
