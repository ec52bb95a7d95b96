-- limits_set.lua: ARGV[7] model, ARGV[8] tenant ('' for the pool, '*' for the pool's tenant
-- default), then field/value pairs (max_inflight, max_queued, weight). Stores them and admits
-- what the new limits allow at once. Returns the number admitted.
local m, tn = ARGV[7], ARGV[8]
local key = P .. 'lim:' .. m
if tn ~= '' then
  key = key .. ':' .. tn
  if tn ~= '*' then redis.call('SADD', P .. 'tenants:' .. m, tn) end
end
redis.call('SADD', P .. 'pools', m)
for i = 9, #ARGV, 2 do redis.call('HSET', key, ARGV[i], ARGV[i + 1]) end
return admit(m, nil)
