-- Release: KEYS[1] lease, KEYS[2] wake list, KEYS[3] term record,
-- KEYS[4] the last released term's token;
-- ARGV[1] ownership token,
-- ARGV[2] release channel, ARGV[3] wake copies, ARGV[4] wake linger (ms).
-- Deletes the lease only if it is still ours and, in the same atomic step,
-- wakes a few waiters: each entry pushed on the wake list goes to one
-- client blocked in BLPOP on it, oldest first. Also announces the release
-- on the channel for observers. With ARGV[3] = 0 it only deletes: Redlock
-- giving back a partial acquire, which ended no one's leadership and must
-- not wake waiters (two refused candidates would wake each other without
-- end). Records the term's token as released: the announcement waiters
-- take the lease at once on (the vacancy rule). Returns 1 if released,
-- else 0.
local owner = redis.sha1hex(ARGV[1])
local record = held_by(KEYS[3])
if record and record.owner == owner then
  -- Our term ends here: the work has stopped (an announced release).
  redis.call('DEL', KEYS[3])
end
local lease = held_by(KEYS[1])
local ended = (record and record.owner == owner and record) or (lease and lease.owner == owner and lease)
if ended and tonumber(ended.fencing_token) then
  local last = tonumber(redis.call('GET', KEYS[4]) or '0') or 0
  redis.call('SET', KEYS[4], string.format('%d', math.max(last, tonumber(ended.fencing_token))))
end
if lease and lease.owner == owner then
  local id = lease.id or ''
  redis.call('DEL', KEYS[1])
  if tonumber(ARGV[3]) == 0 then
    return 1
  end
  redis.call('PUBLISH', ARGV[2], id)
  redis.call('DEL', KEYS[2])
  for _ = 1, tonumber(ARGV[3]) do
    redis.call('RPUSH', KEYS[2], id)
  end
  redis.call('PEXPIRE', KEYS[2], ARGV[4])
  return 1
end
return 0
