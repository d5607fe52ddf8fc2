-- Renew or re-create (Redlock): KEYS[1] lease, KEYS[2] token counter,
-- KEYS[3] term record;
-- ARGV[1] ownership token, ARGV[2] ttl ms, ARGV[3] holder id as a JSON
-- string, ARGV[4] our fencing token, or 0 when the caller's lease may no
-- longer be valid. Returns {1} when still ours (expiry pushed to now + ttl),
-- {1, token} when the key was gone (a node restarted empty, or its clock
-- jumped) and has been re-created as ours, else held_by's reply.
local owner = redis.sha1hex(ARGV[1])
local lease, holder = held_by(KEYS[1])
if lease and lease.owner == owner then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  write_term(KEYS[3], redis.call('GET', KEYS[1]), tonumber(ARGV[2]))
  return {1}
end
local fencing = tonumber(ARGV[4])
if holder[4] ~= -2 or fencing <= 0 then
  return holder
end
-- Someone else's term still renewed here without its lease: not ours to take.
local record, standing = held_by(KEYS[3])
if record and record.owner ~= owner then
  return standing
end
-- The caller still holds a majority and its validity: give this node the
-- lease back rather than leave it free for a minority attempt.
local last = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
if last < fencing then
  redis.call('SET', KEYS[2], string.format('%d', fencing))
end
local value = '{"id":' .. ARGV[3] .. ',"fencing_token":' .. string.format('%d', fencing) .. ',"owner":"' .. redis.sha1hex(ARGV[1]) .. '"}'
redis.call('SET', KEYS[1], value, 'PX', ARGV[2], 'NX')
write_term(KEYS[3], value, tonumber(ARGV[2]))
return {1, fencing}
