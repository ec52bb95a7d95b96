-- heartbeat.lua: ARGV[7] router instance (marked alive until now + DEADLINE), ARGV[8] k, ARGV[9..8+k]
-- the routers this one last saw alive ('?': it does not know), then groups of 7: id, local state
-- ('W' waiting or 'L' leased), model, tenant, class, request id, FIFO order key ('0': none). Renews the deadline of each entry Redis knows;
-- re-creates the ones it lost (Redis restarted without data, or reaped while this router
-- stalled): a lease is re-registered as a lease (it is really running), a waiting entry is
-- queued again in its old place (its order key). During a hold after a data loss, the hold ends
-- as soon as every router any re-registering router saw alive has re-registered (but not before
-- 2 s after the loss).
-- Returns {renewed, restored_leases, restored_waiting, admitted,
-- {ids the router thinks waiting that Redis has admitted (their ticket is late or was lost)},
-- {routers alive now}, hold_left_ms}.
local r = ARGV[7]
redis.call('ZADD', P .. 'routers', NOW + DEADLINE, r)
local renewed, rl, rw, admitted = 0, 0, 0, 0
local pools = {}
local admitted_ids = {}
local np = tonumber(ARGV[8])
for i = 9 + np, #ARGV, 7 do
  local id, want, m, tn, p = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], tonumber(ARGV[i + 4])
  local order = tonumber(ARGV[i + 6])
  if order == 0 then order = nil end
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
      queue_entry(id, m, tn, p, order)
      pools[m] = true
      rw = rw + 1
    end
  end
end
-- Leases Redis had lost, within one hold of a new epoch: a router without evidence created the
-- epoch first (no hold). Hold now until one hold after the epoch, so the others re-register too.
-- (Not once the hold ended early below: hold_done records that every router re-registered.)
if rl > 0 and hold_left() == 0 and redis.call('EXISTS', P .. 'hold_done') == 0 then
  local ep = tonumber(redis.call('GET', P .. 'epoch')) or NOW
  if NOW - ep < HOLD then redis.call('SET', P .. 'hold', tostring(ep + HOLD)) end
end
-- The hold waits for the routers that were alive: each re-registering router adds the ones it
-- saw (hold_peers) and itself (hold_done); when none is missing, the hold ends now instead of
-- after HOLD. A router that knows no peers sends '?', which never re-registers: full hold.
if hold_left() > 0 then
  redis.call('SADD', P .. 'hold_peers', r)
  for j = 9, 8 + np do redis.call('SADD', P .. 'hold_peers', ARGV[j]) end
  redis.call('SADD', P .. 'hold_done', r)
  if #redis.call('SDIFF', P .. 'hold_peers', P .. 'hold_done') == 0 then
    -- not before 2 s after the loss: a router that joined within the last heartbeat period is
    -- missing from the others' lists, and its data-loss watch (1 s) re-registers it by then
    local ep = tonumber(redis.call('GET', P .. 'epoch')) or NOW
    local floor = ep + math.min(HOLD, 2000)
    if floor <= NOW then
      redis.call('DEL', P .. 'hold')
      for _, m in ipairs(redis.call('SMEMBERS', P .. 'pools')) do pools[m] = true end
    else
      redis.call('SET', P .. 'hold', tostring(floor))
    end
  end
end
for m in pairs(pools) do admitted = admitted + admit(m, nil) end
return {renewed, rl, rw, admitted, admitted_ids, redis.call('ZRANGEBYSCORE', P .. 'routers', NOW, '+inf'), hold_left()}
