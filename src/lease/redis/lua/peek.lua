-- Peek: KEYS[1] lease, KEYS[2] term record. Returns held_or_term's reply;
-- {0, false, false, -2} when vacant.
local _, holder = held_or_term(KEYS[1], KEYS[2])
return holder
