-- Candidates: KEYS[1] the registry (see register.lua). Returns the live
-- records' JSON; writes nothing.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {}
for _, e in pairs(registry_entries(KEYS[1])) do
  if tonumber(e.x) > now then
    out[#out + 1] = e.r
  end
end
return out
