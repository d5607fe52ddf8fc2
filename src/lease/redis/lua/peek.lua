-- Peek: KEYS[1] lease. Returns held_by's reply; {0, false, false, -2} when vacant.
local _, holder = held_by(KEYS[1])
return holder
