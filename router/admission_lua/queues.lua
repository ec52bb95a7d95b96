-- queues.lua: ARGV[7] model ('' for all pools). Returns rows of 7 strings: model, tenant ('' for
-- the pool row), queued, inflight, max_inflight, max_queued, weight.
local out = {}
local models = {ARGV[7]}
if ARGV[7] == '' then models = redis.call('SMEMBERS', P .. 'pools') end
table.sort(models)
for _, m in ipairs(models) do
  local pinf, pq = pool_limits(m)
  for _, v in ipairs({m, '', redis.call('ZCARD', P .. 'wq:' .. m), redis.call('ZCARD', P .. 'ls:' .. m),
                      pinf, pq, 1}) do out[#out + 1] = tostring(v) end
  local ts = redis.call('SMEMBERS', P .. 'tenants:' .. m)
  table.sort(ts)
  for _, tn in ipairs(ts) do
    local inf, q, w = tenant_limits(m, tn)
    for _, v in ipairs({m, tn, tenant_queued(m, tn), redis.call('SCARD', P .. 'lt:' .. m .. ':' .. tn),
                        inf, q, w}) do out[#out + 1] = tostring(v) end
  end
end
return out
