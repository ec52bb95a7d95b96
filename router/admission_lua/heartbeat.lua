-- heartbeat.lua: ARGV[7] router instance (marked alive until now + DEADLINE), then groups of 6: id, local state ('W' waiting or
-- 'L' leased), model, tenant, class, request id. Renews the deadline of each entry Redis knows;
-- re-creates the ones it lost (Redis restarted without data, or reaped while this router
-- stalled): a lease is re-registered as a lease (it is really running), a waiting entry is
-- queued again at the tail. Returns {renewed, restored_leases, restored_waiting, admitted,
-- {ids the router thinks waiting that Redis has admitted (their ticket is late or was lost)}}.
local r = ARGV[7]
redis.call('ZADD', P .. 'routers', NOW + DEADLINE, r)
local renewed, rl, rw, admitted = 0, 0, 0, 0
local pools = {}
local admitted_ids = {}
for i = 8, #ARGV, 6 do
  local id, want, m, tn, p = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], tonumber(ARGV[i + 4])
  local st = redis.call('HGET', P .. 'e:' .. id, 'st')
  if st == 'W' then
    redis.call('ZADD', P .. 'wq:' .. m, 'XX', NOW + DEADLINE, id)
    renewed = renewed + 1
  elseif st == 'L' then
    redis.call('ZADD', P .. 'ls:' .. m, 'XX', NOW + DEADLINE, id)
    renewed = renewed + 1
    if want == 'W' then admitted_ids[#admitted_ids + 1] = id end
  else
    redis.call('HSET', P .. 'e:' .. id, 'm', m, 't', tn, 'p', p, 'r', r, 'rid', ARGV[i + 5],
               'st', 'W', 'ts', NOW)
    redis.call('SADD', P .. 'pools', m)
    redis.call('SADD', P .. 'tenants:' .. m, tn)
    if want == 'L' then
      add_lease(id, m, tn)
      rl = rl + 1
    else
      queue_entry(id, m, tn, p)
      pools[m] = true
      rw = rw + 1
    end
  end
end
-- Leases Redis had lost, within one hold of a new epoch: a router without evidence created the
-- epoch first (no hold). Hold now until one hold after the epoch, so the others re-register too.
if rl > 0 and hold_left() == 0 then
  local ep = tonumber(redis.call('GET', P .. 'epoch')) or NOW
  if NOW - ep < HOLD then redis.call('SET', P .. 'hold', tostring(ep + HOLD)) end
end
for m in pairs(pools) do admitted = admitted + admit(m, nil) end
return {renewed, rl, rw, admitted, admitted_ids}
