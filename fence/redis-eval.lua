-- leaderd's fence for Redis before 7 (EVAL / EVALSHA): the functions of
-- fence/redis.lua in one script, the operation named by the first argument.
-- Generated from fence/redis.lua by `leaderd fence install redis-eval`.
--
--   EVAL "$(cat fence/redis-eval.lua)" N FENCE KEY...  OPERATION TOKEN ARG...
--
-- OPERATION is set, hset, del, xadd, call, raise or token, and the keys
-- and the other arguments are those of the function of that name:
-- FCALL leaderd_fence_set 2 FENCE KEY TOKEN VALUE is
-- EVAL <script> 2 FENCE KEY set TOKEN VALUE. Load it once (SCRIPT LOAD)
-- and call EVALSHA; after a NOSCRIPT (a restart, a SCRIPT FLUSH) EVAL it.

local registered = {}
local function register(name, callback)
    if type(name) == 'table' then
        registered[name.function_name] = name.callback
    else
        registered[name] = callback
    end
end

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

register('leaderd_fence_set', fenced(function(keys, args)
    return redis.call('SET', keys[2], unpack(args, 2))
end))

register('leaderd_fence_hset', fenced(function(keys, args)
    return redis.call('HSET', keys[2], unpack(args, 2))
end))

register('leaderd_fence_del', fenced(function(keys, _)
    if #keys < 2 then
        return 0
    end
    return redis.call('DEL', unpack(keys, 2))
end))

register('leaderd_fence_xadd', fenced(function(keys, args)
    return redis.call('XADD', keys[2], unpack(args, 2))
end))

register('leaderd_fence_call', fenced(function(_, args)
    return redis.call(unpack(args, 2))
end))

-- What leaderd itself calls as a term starts (--fence-redis), so the
-- fence refuses the old term before the new one's first write.
register('leaderd_fence_raise', fenced(function(keys, _)
    return tonumber(redis.call('GET', keys[1]))
end))

register{
    function_name = 'leaderd_fence_token',
    callback = function(keys, _)
        return tonumber(redis.call('GET', keys[1]) or '0')
    end,
    flags = { 'no-writes' },
}

local callback = registered['leaderd_fence_' .. tostring(ARGV[1])]
if not callback then
    return redis.error_reply('LDF02 leaderd fence: no operation ' .. tostring(ARGV[1])
        .. '; the first argument names one: set, hset, del, xadd, call, raise or token')
end
return callback(KEYS, { unpack(ARGV, 2) })
