-- Register: KEYS[1] the election's candidates registry, one JSON object
-- {id: {"r": the record's JSON, "x": its expiry in ms on the server's
-- clock}}. ARGV[1] our id, ARGV[2] our record's JSON ('' removes ours),
-- ARGV[3] the TTL in ms. Drops the expired records, writes ours, and
-- returns the live records' JSON (ours included). Only GET, SET, DEL and
-- TIME: the ACL leaderd needs stays what it was. The key outlives the last
-- write by two TTLs, so an election nobody runs any more leaves nothing.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[3])
local live, count, out = {}, 0, {}
for id, e in pairs(registry_entries(KEYS[1])) do
  if id ~= ARGV[1] and tonumber(e.x) > now then
    live[id] = e
    count = count + 1
  end
end
if ARGV[2] ~= '' then
  live[ARGV[1]] = {r = ARGV[2], x = now + ttl}
  count = count + 1
end
for _, e in pairs(live) do
  out[#out + 1] = e.r
end
if count == 0 then
  redis.call('DEL', KEYS[1])
else
  redis.call('SET', KEYS[1], cjson.encode(live), 'PX', ttl * 3)
end
return out
