-- common.lua: prelude of every admission script (concatenated in front of each step at load time).
-- ARGV[1] key prefix, ARGV[2] lease/entry TTL ms, ARGV[3] hold ms after a fresh Redis (negative:
-- the same length, but the caller has no evidence of an earlier life of this Redis),
-- ARGV[4] default pool max_inflight, ARGV[5] default pool max_queued, ARGV[6] max admissions
-- per call. Step-specific arguments start at ARGV[7]. Key layout: see router/ADMISSION.md.
local P = ARGV[1]
local TTL = tonumber(ARGV[2])
-- Deadlines of leases, waiting entries and router liveness: 3/4 of the TTL after the last renewal.
-- Routers renew every TTL/4 and reap every TTL/4, so a dead router's entries are reclaimed within
-- one TTL of its death (3/4 TTL to the deadline, at most 1/4 TTL to the next reap).
local DEADLINE = math.floor(TTL * 3 / 4)
local HOLD = math.abs(tonumber(ARGV[3]))
local EVIDENCE = tonumber(ARGV[3]) > 0
local DEF_INF = tonumber(ARGV[4])
local DEF_Q = tonumber(ARGV[5])
local MAX_ADMIT = tonumber(ARGV[6])
local tm = redis.call('TIME')
local NOW = tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)

-- A Redis without our epoch key is new or lost its data. When there is evidence of an earlier
-- life (the caller has used a Redis at this address before, or pools are still listed), hold
-- admissions for one lease TTL so every live router re-registers the leases it holds
-- (heartbeat) before anything is admitted. A brand-new deployment admits at once.
if redis.call('EXISTS', P .. 'epoch') == 0 then
  redis.call('SET', P .. 'epoch', tostring(NOW))
  if EVIDENCE or redis.call('EXISTS', P .. 'pools') == 1 then
    redis.call('SET', P .. 'hold', tostring(NOW + HOLD))
  end
end

local function hold_left()
  local h = tonumber(redis.call('GET', P .. 'hold'))
  if h and h > NOW then return h - NOW end
  return 0
end

local function pool_limits(m)
  local v = redis.call('HMGET', P .. 'lim:' .. m, 'max_inflight', 'max_queued')
  return tonumber(v[1]) or DEF_INF, tonumber(v[2]) or DEF_Q
end

-- Tenant limits: the tenant's own hash, then the pool's "*" tenant hash, then the pool's values.
local lim_cache = {}
local function tenant_limits(m, tn)
  local ck = m .. '\0' .. tn
  local c = lim_cache[ck]
  if c then return c[1], c[2], c[3] end
  local pinf, pq = pool_limits(m)
  local v = redis.call('HMGET', P .. 'lim:' .. m .. ':' .. tn, 'max_inflight', 'max_queued', 'weight')
  local d = {false, false, false}
  if not (v[1] and v[2] and v[3]) then
    d = redis.call('HMGET', P .. 'lim:' .. m .. ':*', 'max_inflight', 'max_queued', 'weight')
  end
  local inf = tonumber(v[1]) or tonumber(d[1]) or pinf
  local q = tonumber(v[2]) or tonumber(d[2]) or pq
  local w = tonumber(v[3]) or tonumber(d[3]) or 1
  if w <= 0 then w = 1 end
  lim_cache[ck] = {inf, q, w}
  return inf, q, w
end

local function qkey(m, tn, p) return P .. 'q:' .. m .. ':' .. tn .. ':' .. p end

local function tenant_queued(m, tn)
  return redis.call('ZCARD', qkey(m, tn, 0)) + redis.call('ZCARD', qkey(m, tn, 1))
end

-- A tenant with waiting entries of class p is in act:M:p, scored by its pass (virtual time of
-- its next admission). On (re)activation the pass is max(saved pass, class virtual time).
local function activate(m, tn, p)
  local act = P .. 'act:' .. m .. ':' .. p
  if redis.call('ZSCORE', act, tn) then return end
  local saved = tonumber(redis.call('HGET', P .. 'pass:' .. m .. ':' .. p, tn)) or 0
  local vt = tonumber(redis.call('GET', P .. 'vt:' .. m .. ':' .. p)) or 0
  if vt > saved then saved = vt end
  redis.call('ZADD', act, saved, tn)
end

local function deactivate_if_empty(m, tn, p)
  if redis.call('ZCARD', qkey(m, tn, p)) > 0 then return end
  local act = P .. 'act:' .. m .. ':' .. p
  local s = redis.call('ZSCORE', act, tn)
  if s then
    redis.call('HSET', P .. 'pass:' .. m .. ':' .. p, tn, s)
    redis.call('ZREM', act, tn)
  end
end

-- Adds waiting entry id (metadata already in e:id) to its tenant queue and the pool's waiting set.
-- FIFO order key of a new waiting entry: the Redis clock in ms x 1024, kept strictly increasing
-- through P seq. Being time-based, it survives a data loss: an entry re-created afterwards with
-- its old key (heartbeat) stays ahead of the requests that arrived since (a counter restarts at 1).
-- Without a counter (a new Redis, or one that lost its data while entries were queued, whose
-- routers re-create them with their old keys) a new key goes after every key an entry of the
-- same millisecond can have had (1024 per ms), so a request that arrives after a data loss never
-- sorts before one that was waiting (test_router_fault: W3 and N1 in the same millisecond).
local function next_score()
  local cur = tonumber(redis.call('GET', P .. 'seq'))
  local s = cur and math.max(NOW * 1024, cur + 1) or NOW * 1024 + 1023
  redis.call('SET', P .. 'seq', string.format('%.0f', s))
  return s
end

-- Queues a waiting entry (score: its order key, or nil for a new one); returns the order key.
local function queue_entry(id, m, tn, p, score)
  local seq = score or next_score()
  redis.call('ZADD', qkey(m, tn, p), seq, id)
  redis.call('ZADD', P .. 'wq:' .. m, NOW + DEADLINE, id)
  redis.call('SADD', P .. 'pools', m)
  redis.call('SADD', P .. 'tenants:' .. m, tn)
  activate(m, tn, p)
  return seq
end

local function drop_waiting(id, m, tn, p)
  redis.call('ZREM', qkey(m, tn, p), id)
  redis.call('ZREM', P .. 'wq:' .. m, id)
  redis.call('DEL', P .. 'e:' .. id)
  deactivate_if_empty(m, tn, p)
end

local function add_lease(id, m, tn)
  redis.call('ZADD', P .. 'ls:' .. m, NOW + DEADLINE, id)
  redis.call('SADD', P .. 'lt:' .. m .. ':' .. tn, id)
  redis.call('HSET', P .. 'e:' .. id, 'st', 'L', 'at', NOW)
end

local function drop_lease(id, m, tn)
  redis.call('ZREM', P .. 'ls:' .. m, id)
  redis.call('SREM', P .. 'lt:' .. m .. ':' .. tn, id)
  redis.call('DEL', P .. 'e:' .. id)
end

-- Removes id in whatever state it is. Returns 0 (absent), 1 (was waiting), 2 (was leased), and
-- the model it belonged to.
local function drop_any(id)
  local e = redis.call('HMGET', P .. 'e:' .. id, 'st', 'm', 't', 'p')
  if not e[1] then return 0, nil end
  if e[1] == 'W' then
    drop_waiting(id, e[2], e[3], tonumber(e[4]))
    return 1, e[2]
  end
  drop_lease(id, e[2], e[3])
  return 2, e[2]
end

-- Router liveness: heartbeats keep P routers (instance -> deadline) fresh. An instance whose
-- deadline passed is dead; an instance not listed yet (no heartbeat so far) counts as alive.
local DEAD_DROPPED = 0
local function router_dead(r)
  local d = redis.call('ZSCORE', P .. 'routers', r)
  return d and tonumber(d) < NOW
end

-- Admission rate of pool m (P rate:M: s first admission, t last update, r decayed sum), an
-- exponentially weighted rate over RATE_TAU_MS with the start-up bias corrected, so that a
-- Retry-After can say when the queue will have drained.
local RATE_TAU_MS = 10000
local function note_admissions(m, n)
  local k = P .. 'rate:' .. m
  local v = redis.call('HMGET', k, 's', 't', 'r')
  local s, t, r = tonumber(v[1]), tonumber(v[2]), tonumber(v[3]) or 0
  if t then r = r * math.exp(-(NOW - t) / RATE_TAU_MS) else s = NOW end
  redis.call('HSET', k, 's', s, 't', NOW, 'r', tostring(r + n))
end

-- Admissions per second of pool m lately (0 when unknown).
local function admission_rate(m)
  local v = redis.call('HMGET', P .. 'rate:' .. m, 's', 't', 'r')
  local s, t, r = tonumber(v[1]), tonumber(v[2]), tonumber(v[3])
  if not (s and t and r) then return 0 end
  local span = math.max(NOW - s, 1000) -- at least a second of history
  local seen = 1 - math.exp(-span / RATE_TAU_MS)
  return r * math.exp(-(NOW - t) / RATE_TAU_MS) / seen * 1000 / RATE_TAU_MS
end

-- Admits as many waiting entries of pool m as the caps allow (at most MAX_ADMIT): interactive
-- class (0) before batch (1); within a class the eligible tenant (below its max_inflight) with
-- the smallest pass wins and its pass advances by 1/weight (stride scheduling); FIFO within a
-- tenant and class. Each admitted entry becomes a lease and its id is pushed to its router's
-- ticket list, except skip_id (the caller learns about it from the reply). A head entry whose
-- router is dead is dropped instead (counted in DEAD_DROPPED). Returns the count admitted.
local function admit(m, skip_id)
  if hold_left() > 0 then return 0 end
  local pinf = pool_limits(m)
  local ls = P .. 'ls:' .. m
  local inflight = redis.call('ZCARD', ls)
  local n = 0
  local tin = {}
  while n < MAX_ADMIT and inflight < pinf do
    local pick_p, pick_t, pick_pass, pick_w
    for p = 0, 1 do
      local act = P .. 'act:' .. m .. ':' .. p
      local c = redis.call('ZRANGE', act, 0, -1, 'WITHSCORES')
      for i = 1, #c, 2 do
        local tn = c[i]
        local tinf, _, w = tenant_limits(m, tn)
        local cur = tin[tn]
        if not cur then
          cur = redis.call('SCARD', P .. 'lt:' .. m .. ':' .. tn)
          tin[tn] = cur
        end
        if cur < tinf then
          pick_p, pick_t, pick_pass, pick_w = p, tn, tonumber(c[i + 1]), w
          break
        end
      end
      if pick_t then break end
    end
    if not pick_t then break end
    local q = qkey(m, pick_t, pick_p)
    local id = redis.call('ZRANGE', q, 0, 0)[1]
    local r = redis.call('HGET', P .. 'e:' .. id, 'r')
    if r and router_dead(r) then
      drop_waiting(id, m, pick_t, pick_p)
      DEAD_DROPPED = DEAD_DROPPED + 1
    else
      redis.call('ZREM', q, id)
      redis.call('ZREM', P .. 'wq:' .. m, id)
      add_lease(id, m, pick_t)
      if id ~= skip_id and r then
        redis.call('RPUSH', P .. 'tk:' .. r, id)
        redis.call('PEXPIRE', P .. 'tk:' .. r, TTL * 10)
      end
      local act = P .. 'act:' .. m .. ':' .. pick_p
      redis.call('SET', P .. 'vt:' .. m .. ':' .. pick_p, tostring(pick_pass))
      local np = pick_pass + 1 / pick_w
      if redis.call('ZCARD', q) > 0 then
        redis.call('ZADD', act, np, pick_t)
      else
        redis.call('HSET', P .. 'pass:' .. m .. ':' .. pick_p, pick_t, tostring(np))
        redis.call('ZREM', act, pick_t)
      end
      tin[pick_t] = tin[pick_t] + 1
      inflight = inflight + 1
      n = n + 1
    end
  end
  if n > 0 then note_admissions(m, n) end
  return n
end
