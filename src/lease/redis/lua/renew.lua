-- Renew: KEYS[1] lease, KEYS[2] term record; ARGV[1] ownership token,
-- ARGV[2] ttl ms, ARGV[3] (optional) the channel each renewal is published
-- on as `TOKEN TTL_MS ID_JSON`, so standbys need not ask. Returns {1} when still ours (expiry pushed to now + ttl,
-- the term record's with it), else held_by's reply ({0, false, false, -2}
-- when the lease is ours but was written from outside: its term record
-- gone or not ours, or its expiry brought forward; the term ends).
local owner = redis.sha1hex(ARGV[1])
local lease, holder = held_by(KEYS[1])
if not (lease and lease.owner == owner) then
  return holder
end
local record = held_by(KEYS[2])
if not (record and record.owner == owner and record.fencing_token == lease.fencing_token) then
  return {0, false, false, -2}
end
local x = tonumber(record.x)
-- 100 ms of room: both expiries were set by one script, on one clock.
if x and holder[4] + 100 < x - now_ms() then
  return {0, false, false, -2}
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
write_term(KEYS[2], redis.call('GET', KEYS[1]), tonumber(ARGV[2]))
if ARGV[3] then
  redis.call('PUBLISH', ARGV[3], string.format('%d %d ', lease.fencing_token, tonumber(ARGV[2])) .. cjson.encode(lease.id))
end
return {1}
