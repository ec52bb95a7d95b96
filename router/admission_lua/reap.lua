-- reap.lua: ARGV[7] max entries reclaimed per pool and kind. For every pool, removes leases and
-- waiting entries whose deadline passed (their router stopped renewing them: it died), then
-- admits what the caps allow (this also ends the hold after a fresh Redis; waiting entries of
-- dead routers met on the way are dropped and counted as reaped).
-- Returns {leases_reaped, waiting_reaped, admitted, hold_left_ms}.
local lim = tonumber(ARGV[7])
local nl, nw, na = 0, 0, 0
for _, m in ipairs(redis.call('SMEMBERS', P .. 'pools')) do
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', P .. 'ls:' .. m, '-inf', NOW, 'LIMIT', 0, lim)) do
    local t = redis.call('HGET', P .. 'e:' .. id, 't')
    redis.call('ZREM', P .. 'ls:' .. m, id)
    if t then redis.call('SREM', P .. 'lt:' .. m .. ':' .. t, id) end
    redis.call('DEL', P .. 'e:' .. id)
    nl = nl + 1
  end
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', P .. 'wq:' .. m, '-inf', NOW, 'LIMIT', 0, lim)) do
    local e = redis.call('HMGET', P .. 'e:' .. id, 't', 'p')
    if e[1] then
      drop_waiting(id, m, e[1], tonumber(e[2]))
    else
      redis.call('ZREM', P .. 'wq:' .. m, id)
    end
    nw = nw + 1
  end
  na = na + admit(m, nil)
end
redis.call('ZREMRANGEBYSCORE', P .. 'routers', '-inf', NOW - 10 * TTL)
return {nl, nw + DEAD_DROPPED, na, hold_left()}
