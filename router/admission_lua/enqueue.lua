-- enqueue.lua: ARGV[7] id, [8] model, [9] tenant, [10] class (0 interactive, 1 batch),
-- [11] router instance, [12] request id.
-- Returns {state, n, order}: {'L', 0} admitted at once (no ticket is pushed for it),
-- {'W', hold_ms, order} waiting (a ticket follows on admission; order: its FIFO key, which the
-- router sends back in heartbeats so a re-created entry keeps its place), {'F', retry_after_s}
-- queue full (nothing stored).
-- Idempotent: an id that exists already returns its current state.
local id, m, tn, p = ARGV[7], ARGV[8], ARGV[9], tonumber(ARGV[10])
local cur = redis.call('HGET', P .. 'e:' .. id, 'st')
if cur then
  local sc = redis.call('ZSCORE', qkey(m, tn, p), id)
  return {cur, hold_left(), sc or '0'}
end
local pinf, pq = pool_limits(m)
local _, tq = tenant_limits(m, tn)
local pool_waiting = redis.call('ZCARD', P .. 'wq:' .. m)
local ten_waiting = tenant_queued(m, tn)
redis.call('HSET', P .. 'e:' .. id, 'm', m, 't', tn, 'p', p, 'r', ARGV[11], 'rid', ARGV[12],
           'st', 'W', 'ts', NOW)
local order = queue_entry(id, m, tn, p)
admit(m, id)
local st = redis.call('HGET', P .. 'e:' .. id, 'st')
if st == 'L' then return {'L', 0} end
if pool_waiting >= pq or ten_waiting >= tq then
  drop_waiting(id, m, tn, p)
  -- Retry-After: when the full queue will have room again, i.e. when the entries beyond its cap
  -- (one, usually) have been admitted at the measured admission rate; without a measure yet, one
  -- second per pool-cap's worth of them. (Not when the whole queue has drained: that told clients
  -- to wait 17 s for a queue that had room after 1.3 s.)
  local over
  if pool_waiting >= pq then over = pool_waiting - pq + 1 else over = ten_waiting - tq + 1 end
  local rate = admission_rate(m)
  local ra
  if rate > 0.01 then ra = math.ceil(over / rate)
  else ra = math.ceil(over / math.max(pinf, 1)) end
  if ra < 1 then ra = 1 end
  if ra > 60 then ra = 60 end
  return {'F', ra}
end
return {'W', hold_left(), string.format('%.0f', order)}
