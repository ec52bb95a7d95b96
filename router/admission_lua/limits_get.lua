-- limits_get.lua: ARGV[7] model, ARGV[8] tenant ('' for the pool). Returns the effective
-- {max_inflight, max_queued, weight} as strings (defaults applied).
local m, tn = ARGV[7], ARGV[8]
if tn == '' then
  local inf, q = pool_limits(m)
  return {tostring(inf), tostring(q), '1'}
end
local inf, q, w = tenant_limits(m, tn)
return {tostring(inf), tostring(q), tostring(w)}
