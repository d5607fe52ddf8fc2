-- Peek: KEYS[1] lease, KEYS[2] term record, KEYS[3] token counter,
-- KEYS[4] the last released term's token; ARGV[1] ttl ms. Returns who
-- holds the lease, or held by the vacancy rule (writing nothing);
-- {0, false, false, -2} when vacant.
local _, holder = held_by(KEYS[1])
if holder[4] ~= -2 then
  return holder
end
return vacancy(KEYS[2], KEYS[3], KEYS[4], tonumber(ARGV[1]), false) or holder
