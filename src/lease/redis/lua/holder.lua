-- Shared prelude: who holds KEYS[1], without ever returning the ownership token.
-- Returns {0, id|false, fencing_token|false, pttl}: id and token are false when
-- the key holds something leaderd did not write.
local function held_by(key)
  local current = redis.call('GET', key)
  if not current then
    return nil, {0, false, false, -2}
  end
  local pttl = redis.call('PTTL', key)
  local ok, lease = pcall(cjson.decode, current)
  if not ok or type(lease) ~= 'table' then
    return nil, {0, false, false, pttl}
  end
  local id = lease.id
  if type(id) ~= 'string' then id = false end
  local fencing = lease.fencing_token
  if type(fencing) ~= 'number' then fencing = false end
  return lease, {0, id, fencing, pttl}
end

-- The lease at `key`; when there is none, the term record at `term` (written
-- and renewed with every lease, deleted by its release): a lease deleted
-- from outside while its holder still renews, and may still be working.
-- Waiters wait for the record as for a lease.
local function held_or_term(key, term)
  local lease, holder = held_by(key)
  if holder[4] ~= -2 then
    return lease, holder, false
  end
  local record, standing = held_by(term)
  return record, standing, record ~= nil
end

-- The candidates registry at `key` (see register.lua) as a table of id →
-- entry, skipping anything that is not an entry; empty when the key is
-- missing or holds something leaderd did not write.
local function registry_entries(key)
  local entries = {}
  local raw = redis.call('GET', key)
  if not raw then
    return entries
  end
  local ok, all = pcall(cjson.decode, raw)
  if not ok or type(all) ~= 'table' then
    return entries
  end
  for id, e in pairs(all) do
    if type(id) == 'string' and type(e) == 'table' and type(e.r) == 'string' and tonumber(e.x) then
      entries[id] = e
    end
  end
  return entries
end
