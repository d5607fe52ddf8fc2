#!lua name=leaderd_fence
-- leaderd's fence for Redis 7 and Valkey (a function library): the store
-- refuses a write from a deposed leader. Load it once per server (per
-- primary in a cluster):
--
--   redis-cli -x FUNCTION LOAD REPLACE < fence/redis.lua
--
-- Every write function takes the fence key first and the data keys after
-- it, and the fencing token as its first argument (before Redis 7:
-- fence/redis-eval.lua, the same functions for EVAL):
--
--   FCALL leaderd_fence_set   2 FENCE KEY   TOKEN VALUE [SET options...]
--   FCALL leaderd_fence_hset  2 FENCE KEY   TOKEN FIELD VALUE [FIELD VALUE...]
--   FCALL leaderd_fence_del   N FENCE KEY...  TOKEN
--   FCALL leaderd_fence_xadd  2 FENCE KEY   TOKEN ID FIELD VALUE [FIELD VALUE...]
--   FCALL leaderd_fence_call  N FENCE KEY...  TOKEN COMMAND ARG...
--   FCALL leaderd_fence_raise 1 FENCE         TOKEN    (raise only; the fence's token)
--   FCALL_RO leaderd_fence_token 1 FENCE      the token the fence holds (0: none)
--
-- Atomically: a token older than the fence's is refused with an error
-- whose code is LDF01 and which names both tokens; a newer one raises the
-- fence; then the write runs. In a cluster the fence key and the data keys
-- must share a hash tag ({jobs}:fence, {jobs}:results). Tokens are whole
-- numbers below 2^53 (Lua's exact integers; every leaderd backend's tokens
-- are). docs/fencing.md states what this guarantees and what it cannot
-- (an asynchronous replica may lose the fence at a failover: WAIT).

local function check(fence, token)
    local t = tonumber(token)
    if not t or t < 0 or t ~= math.floor(t) or t >= 2^53 then
        return redis.error_reply('LDF02 leaderd fence: no fencing token (got ' .. tostring(token)
            .. '): pass LEADERD_FENCING_TOKEN, a whole number, as the first argument')
    end
    local seen = tonumber(redis.call('GET', fence) or '0')
    if t < seen then
        return redis.error_reply(string.format(
            'LDF01 leaderd fence: fencing token %d is older than token %d that already wrote for %s;'
            .. ' this worker was deposed: stop, and do not retry with this token', t, seen, fence))
    end
    if t > seen then
        redis.call('SET', fence, string.format('%d', t))
    end
    return nil
end

-- Runs `write` only past the fence.
local function fenced(write)
    return function(keys, args)
        if #keys < 1 then
            return redis.error_reply('LDF02 leaderd fence: the fence key must be the first key')
        end
        local refused = check(keys[1], args[1])
        if refused then
            return refused
        end
        return write(keys, args)
    end
end

redis.register_function('leaderd_fence_set', fenced(function(keys, args)
    return redis.call('SET', keys[2], unpack(args, 2))
end))

redis.register_function('leaderd_fence_hset', fenced(function(keys, args)
    return redis.call('HSET', keys[2], unpack(args, 2))
end))

redis.register_function('leaderd_fence_del', fenced(function(keys, _)
    if #keys < 2 then
        return 0
    end
    return redis.call('DEL', unpack(keys, 2))
end))

redis.register_function('leaderd_fence_xadd', fenced(function(keys, args)
    return redis.call('XADD', keys[2], unpack(args, 2))
end))

redis.register_function('leaderd_fence_call', fenced(function(_, args)
    return redis.call(unpack(args, 2))
end))

-- What leaderd itself calls as a term starts (--fence-redis), so the
-- fence refuses the old term before the new one's first write.
redis.register_function('leaderd_fence_raise', fenced(function(keys, _)
    return tonumber(redis.call('GET', keys[1]))
end))

redis.register_function{
    function_name = 'leaderd_fence_token',
    callback = function(keys, _)
        return tonumber(redis.call('GET', keys[1]) or '0')
    end,
    flags = { 'no-writes' },
}
