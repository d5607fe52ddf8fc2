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

-- The server's clock in ms.
local function now_ms()
  local time = redis.call('TIME')
  return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end

-- The term record for the lease value `value` (its JSON text): the same,
-- with its logical expiry `x` in ms on the server's clock, kept `ttl` ms
-- past it, so a look after the expiry still finds it: the proof that its
-- holder stopped renewing (the contract's vacancy rule).
local function write_term(key, value, ttl)
  local x = now_ms() + ttl
  redis.call('SET', key, string.sub(value, 1, -2) .. ',"x":' .. string.format('%d', x) .. '}', 'PX', 2 * ttl)
end

-- Whether the lease, missing at its key, is free by the vacancy rule, from
-- the term record at `term`, the token counter at `fence` (the latest
-- term's token) and the token of the last term its holder released at
-- `ended`. Returns nil when free, else a held reply. Free only when the
-- latest term's record is still there past its expiry (its holder stopped
-- renewing), its release was announced, or no term was ever handed out
-- here. Any other vacancy (the records deleted, shortened, or an older
-- term's put back, from outside) is held for `hold` ms from the first look
-- that finds it, written as a vacant term record when `write` (acquire;
-- peek only reports it): its holder may still be working until its next
-- renewal finds the lease gone.
local function vacancy(term, fence, ended, hold, write)
  local latest = tonumber(redis.call('GET', fence) or '')
  local now = now_ms()
  local record, standing = held_by(term)
  if record then
    local x = tonumber(record.x)
    if not x then
      -- An older leaderd's record: held while its key lives.
      return standing
    end
    if x > now then
      return {0, standing[2], standing[3], x - now}
    end
    local token = tonumber(record.fencing_token)
    if not latest or (token and token >= latest) then
      return nil
    end
  end
  if not latest then
    return nil
  end
  local released = tonumber(redis.call('GET', ended) or '')
  if released and released >= latest then
    return nil
  end
  if write then
    local value = '{"fencing_token":' .. string.format('%d', latest) .. ',"vacant":true}'
    write_term(term, value, hold)
  end
  return {0, false, latest, hold}
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
