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
