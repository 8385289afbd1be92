#!lua name=hullguard
-- hullguard fleet mode: block leases of one pool limit, shared by a fleet of holders.
-- The contract: docs/design.md §16.2 (protocol v1). Loaded with FUNCTION LOAD REPLACE when
-- hg_version answers another version.
-- Algorithm: Doorman FAIR_SHARE (youtube/doorman doc/algorithms.md) with integer shares;
-- learning mode after lost state (youtube/doorman doc/design.md).
--
-- KEYS (always 6, one hash tag, one cluster slot), of one dimension D of pool P: the permits
-- (D empty: {hg:P}:cfg, ...) or the budget units (D = 'budget:': {hg:P}:budget:cfg, ...), two
-- independent lease tables in one slot:
--   1 {hg:P}:cfg    HASH  limit epoch fence base used want_sum learn_until rev
--   2 {hg:P}:held   HASH  holder -> permits held
--   3 {hg:P}:gen    HASH  holder -> generation (fencing token)
--   4 {hg:P}:exp    ZSET  holder -> expiry (server ms)
--   5 {hg:P}:want   HASH  holder -> last reported want
--   6 {hg:P}:served HASH  holder -> server ms of its last grow
-- Every number is an integer < 2^53 and is passed to redis.call as a '%d' string: Redis < 7
-- (the EVAL fallback) formats a bare Lua number with %.14g, e.g. a fence as 1.796514869786e+15,
-- which HINCRBY would then reject.

local LIB_VERSION = 3
local REAP_BUDGET = 128            -- expired holders reaped per call (bounded work)
local MAX_SAFE = 9007199254740991  -- 2^53 - 1
local MAX_LIMIT = 4294967296       -- 2^32
local MAX_TTL = 3600000            -- one hour, in ms
local MAX_HOLDERS = 100000
local SUFFIXES = { 'cfg', 'held', 'gen', 'exp', 'want', 'served' }

local function fmt(n) return string.format('%d', n) end

local function fail(msg) return redis.error_reply('ERR hullguard: ' .. msg) end

-- Server time in ms (the only clock the protocol uses).
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Server time in µs (about 1.8e15: exact in a Lua double): a new state's epoch and fence base,
-- unique even when a state is recreated in the same millisecond as the one it replaces.
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- An integer argument in lo..=hi, or nil + the contract's error reply.
local function int_arg(v, name, lo, hi)
  local n
  if type(v) == 'string' and #v <= 20 and string.find(v, '^%-?%d+$') then n = tonumber(v) end
  if n == nil or n < lo or n > hi then
    return nil, fail(name .. ' must be an integer in ' .. fmt(lo) .. '..=' .. fmt(hi))
  end
  return n
end

-- The 6 keys of one dimension of a pool: {hg:P}:<D><suffix>, P = 1..=64 of [A-Za-z0-9_.:-],
-- D = '' (permits) or 'budget:' (budget units).
local function check_keys(keys)
  local msg = 'keys must be the 6 keys {hg:<pool>}:[budget:]cfg,held,gen,exp,want,served '
    .. '(pool: 1..=64 of [A-Za-z0-9_.:-])'
  if #keys ~= 6 then return fail(msg) end
  local pool, dim = string.match(keys[1], '^{hg:([A-Za-z0-9_.:%-]+)}:(.-)cfg$')
  if pool == nil or #pool > 64 or (dim ~= '' and dim ~= 'budget:') then return fail(msg) end
  local prefix = '{hg:' .. pool .. '}:' .. dim
  for i = 2, 6 do
    if keys[i] ~= prefix .. SUFFIXES[i] then return fail(msg) end
  end
  return nil
end

local function check_argc(args, n, fname)
  if #args ~= n then
    return fail(fname .. ' takes ' .. n .. ' arguments, got ' .. #args)
  end
  return nil
end

-- Holder ids: 1..=128 printable ASCII characters, no spaces.
local function check_holder(h)
  if type(h) ~= 'string' or #h < 1 or #h > 128 or not string.find(h, '^[!-~]+$') then
    return fail('holder must be 1..=128 printable ASCII characters without spaces')
  end
  return nil
end

-- cfg as numbers, or nil when the pool has no state.
local function read_cfg(key)
  local c = redis.call('HMGET', key, 'limit', 'epoch', 'fence', 'base', 'used', 'want_sum',
    'learn_until', 'rev')
  if c[1] == false then return nil end
  return {
    limit = tonumber(c[1]), epoch = tonumber(c[2]), fence = tonumber(c[3]),
    base = tonumber(c[4]), used = tonumber(c[5]) or 0, want_sum = tonumber(c[6]) or 0,
    learn_until = tonumber(c[7]) or 0, rev = tonumber(c[8]) or 0,
  }
end

-- A fresh pool state. Its epoch and fence base are the server's µs: unique per state, and the
-- fence stays above every gen an earlier state handed out (one gen per call, and a call takes
-- more than a µs), so `gen < base` tells a lease of an earlier state. Whatever is left of an
-- earlier state's other keys (some evicted, some not: an allkeys-* maxmemory policy, a DEL) is
-- deleted: the holders' records must never outlive the `used` they add up to.
local function create_cfg(keys, limit, learn_until)
  local us = now_us()
  redis.call('DEL', keys[2], keys[3], keys[4], keys[5], keys[6])
  redis.call('HSET', keys[1], 'limit', fmt(limit), 'epoch', fmt(us), 'fence', fmt(us),
    'base', fmt(us), 'used', '0', 'want_sum', '0', 'learn_until', fmt(learn_until), 'rev', '0')
  return {
    limit = limit, epoch = us, fence = us, base = us, used = 0, want_sum = 0,
    learn_until = learn_until, rev = 0,
  }
end

-- Delete every record of a holder; returns what it held and wanted.
local function drop(keys, holder)
  local held = tonumber(redis.call('HGET', keys[2], holder)) or 0
  local want = tonumber(redis.call('HGET', keys[5], holder)) or 0
  redis.call('HDEL', keys[2], holder)
  redis.call('HDEL', keys[3], holder)
  redis.call('ZREM', keys[4], holder)
  redis.call('HDEL', keys[5], holder)
  redis.call('HDEL', keys[6], holder)
  return held, want
end

-- Reap at most REAP_BUDGET holders whose lease expired (exp <= now); updates cfg in memory and
-- in Redis.
local function reap(keys, cfg, now)
  local dead = redis.call('ZRANGEBYSCORE', keys[4], '-inf', fmt(now), 'LIMIT', 0, REAP_BUDGET)
  if #dead == 0 then return end
  for _, h in ipairs(dead) do
    local held, want = drop(keys, h)
    cfg.used = cfg.used - held
    cfg.want_sum = cfg.want_sum - want
  end
  redis.call('HSET', keys[1], 'used', fmt(cfg.used), 'want_sum', fmt(cfg.want_sum))
end

-- Doorman FAIR_SHARE, in integers, evaluated for one holder only (called when want_sum > limit,
-- O(n) reads + an O(n log n) sort). Wants ascending: a holder wanting no more than an equal
-- split of what is left gets its want; the rest ("unsatisfied") share what is left equally,
-- and the remainder r goes one permit each to r of the unsatisfied holders, in an order that
-- makes the extra permits rotate (below).
local function fair_share(keys, holder, limit)
  local raw = redis.call('HGETALL', keys[5])
  local ws = {}
  for i = 1, #raw, 2 do ws[#ws + 1] = { h = raw[i], w = tonumber(raw[i + 1]) } end
  table.sort(ws, function(a, b) return a.w < b.w end)
  local left, k, i = limit, #ws, 1
  -- Satisfy the small wants, ascending, while they fit an equal split of what is left.
  while i <= #ws do
    local s = math.floor(left / k)
    if ws[i].w > s then break end
    if ws[i].h == holder then return ws[i].w end
    left = left - ws[i].w
    k = k - 1
    i = i + 1
  end
  -- Unsatisfied holders: ws[i..]; k >= 1 since the wants add up to more than the limit.
  local s = math.floor(left / k)
  local r = left - s * k
  if r == 0 then return s end
  -- Rank of this holder among the unsatisfied: first those holding no extra permit, served
  -- longest ago first (missing = 0); then those holding one, granted most recently first (so
  -- the one that has held its extra longest yields it). The first r get s + 1: the extra
  -- permits rotate round-robin, one beat and one drain per turn.
  local served, held = {}, {}
  local sv = redis.call('HGETALL', keys[6])
  for j = 1, #sv, 2 do served[sv[j]] = tonumber(sv[j + 1]) end
  local hv = redis.call('HGETALL', keys[2])
  for j = 1, #hv, 2 do held[hv[j]] = tonumber(hv[j + 1]) end
  local function key(h)
    local t = served[h] or 0
    if (held[h] or 0) > s then return 1, -t end
    return 0, t
  end
  local mg, mt = key(holder)
  local before = 0
  for j = i, #ws do
    local h = ws[j].h
    if h ~= holder then
      local g, t = key(h)
      if g < mg or (g == mg and (t < mt or (t == mt and h < holder))) then before = before + 1 end
    end
  end
  if before < r then return s + 1 end
  return s
end

local function hg_version(_keys, _args)
  return LIB_VERSION
end

-- hg_sync(holder, gen, want, busy, has, ttl_ms, default_limit, learn_ms, max_holders)
-- -> {status, gen, held, target, limit, ttl_ms, epoch, rev, holders, learning, used}
-- status: 1 OK, 0 LOST, 2 FULL.
local function hg_sync(keys, args)
  local err = check_keys(keys) or check_argc(args, 9, 'hg_sync') or check_holder(args[1])
  if err then return err end
  local holder = args[1]
  local gen, want, busy, has, ttl, dlimit, learn_ms, max_holders
  gen, err = int_arg(args[2], 'gen', 0, MAX_SAFE); if err then return err end
  want, err = int_arg(args[3], 'want', 0, MAX_LIMIT); if err then return err end
  busy, err = int_arg(args[4], 'busy', 0, MAX_LIMIT); if err then return err end
  has, err = int_arg(args[5], 'has', 0, MAX_LIMIT); if err then return err end
  ttl, err = int_arg(args[6], 'ttl_ms', 1, MAX_TTL); if err then return err end
  dlimit, err = int_arg(args[7], 'default_limit', 0, MAX_LIMIT); if err then return err end
  learn_ms, err = int_arg(args[8], 'learn_ms', 0, MAX_TTL); if err then return err end
  max_holders, err = int_arg(args[9], 'max_holders', 1, MAX_HOLDERS); if err then return err end

  local now = now_ms()
  -- 1. No state: a new pool (gen 0 creator, no learning) or lost state (a holder that had a
  --    lease finds nothing: learn for learn_ms).
  local cfg = read_cfg(keys[1])
  if cfg == nil then
    local learn_until = 0
    if gen ~= 0 then learn_until = now + learn_ms end
    cfg = create_cfg(keys, dlimit, learn_until)
  end
  -- 2. Reap expired holders (bounded).
  reap(keys, cfg, now)
  -- 3. Learning (Doorman's learning mode, doc/design.md): for one lease length after lost
  --    state, hand back what holders report and grow nobody.
  local learning = now < cfg.learn_until
  local learn_changed = false

  local function refuse(status)
    return { status, 0, 0, 0, cfg.limit, ttl, cfg.epoch, cfg.rev, redis.call('HLEN', keys[3]),
      learning and 1 or 0, cfg.used }
  end

  -- 4. Lease check.
  local rec_gen = tonumber(redis.call('HGET', keys[3], holder))
  local cur = 0
  if gen == 0 then
    -- A new lease. Refuse before touching anything when the pool is full (this holder's own
    -- old record, if any, does not count: it is replaced).
    local n = redis.call('HLEN', keys[3])
    if rec_gen ~= nil then n = n - 1 end
    if n >= max_holders then return refuse(2) end
    if rec_gen ~= nil then
      local held, w = drop(keys, holder)
      cfg.used = cfg.used - held
      cfg.want_sum = cfg.want_sum - w
    end
    gen = redis.call('HINCRBY', keys[1], 'fence', 1)
    redis.call('HSET', keys[2], holder, '0')
    redis.call('HSET', keys[3], holder, fmt(gen))
  elseif rec_gen == gen then
    -- Renewal of a live lease.
    cur = tonumber(redis.call('HGET', keys[2], holder)) or 0
  elseif rec_gen == nil and gen < cfg.base and now < math.floor(cfg.epoch / 1000) + learn_ms then
    -- A lease from before this pool state (state was lost) reporting within one learning
    -- period of the new epoch: re-admit it with what it has (`has` is trusted only here), as
    -- far as the limit allows, keeping its gen. The max_holders guard applies here too.
    if redis.call('HLEN', keys[3]) >= max_holders then return refuse(2) end
    if math.floor(cfg.epoch / 1000) + learn_ms > cfg.learn_until then
      cfg.learn_until = math.floor(cfg.epoch / 1000) + learn_ms
      learn_changed = true
    end
    learning = true
    cur = math.min(has, math.max(cfg.limit - cfg.used, 0))
    redis.call('HSET', keys[2], holder, fmt(cur))
    redis.call('HSET', keys[3], holder, fmt(gen))
    cfg.used = cfg.used + cur
  else
    -- Expired and reaped, fenced by a newer lease, or a gen this state never issued.
    return refuse(0)
  end

  -- 5. Record the want.
  local old_want = tonumber(redis.call('HGET', keys[5], holder)) or 0
  cfg.want_sum = cfg.want_sum + want - old_want
  redis.call('HSET', keys[5], holder, fmt(want))

  -- 6. Target: the want when everything fits (O(1)), else this holder's fair share (O(n)).
  local target = want
  if cfg.want_sum > cfg.limit then target = fair_share(keys, holder, cfg.limit) end

  -- 7. Move towards max(target, busy): in-flight permits are never revoked. Shrink at once;
  --    grow only into free permits, and not at all while learning.
  local desired = math.max(target, busy)
  local new = cur
  if learning then
    if desired < cur then new = desired end
  elseif desired < cur then
    new = desired
  elseif desired > cur then
    new = cur + math.min(desired - cur, math.max(cfg.limit - cfg.used, 0))
  end
  if new > cur then redis.call('HSET', keys[6], holder, fmt(now)) end

  -- 8. Store the block and renew the lease.
  if new ~= cur then redis.call('HSET', keys[2], holder, fmt(new)) end
  cfg.used = cfg.used + new - cur
  redis.call('ZADD', keys[4], fmt(now + ttl), holder)
  if learn_changed then
    redis.call('HSET', keys[1], 'used', fmt(cfg.used), 'want_sum', fmt(cfg.want_sum),
      'learn_until', fmt(cfg.learn_until))
  else
    redis.call('HSET', keys[1], 'used', fmt(cfg.used), 'want_sum', fmt(cfg.want_sum))
  end

  -- 9. Reply.
  return { 1, gen, new, target, cfg.limit, ttl, cfg.epoch, cfg.rev, redis.call('HLEN', keys[3]),
    learning and 1 or 0, cfg.used }
end

-- hg_release(holder, gen) -> permits freed, or -1 when fenced (no record, or another gen).
local function hg_release(keys, args)
  local err = check_keys(keys) or check_argc(args, 2, 'hg_release') or check_holder(args[1])
  if err then return err end
  local holder = args[1]
  local gen
  gen, err = int_arg(args[2], 'gen', 0, MAX_SAFE); if err then return err end
  -- Fence: only the current lease may free its permits.
  local rec_gen = tonumber(redis.call('HGET', keys[3], holder))
  if rec_gen == nil or rec_gen ~= gen then return -1 end
  local held, want = drop(keys, holder)
  local cfg = read_cfg(keys[1])
  if cfg ~= nil then
    redis.call('HSET', keys[1], 'used', fmt(cfg.used - held), 'want_sum', fmt(cfg.want_sum - want))
  end
  return held
end

-- hg_set_limit(limit, rev, default_limit) -> {applied, rev_in_force, limit_in_force}.
-- Revisioned (only a higher rev applies); a lower limit is reached as holders sync down.
local function hg_set_limit(keys, args)
  local err = check_keys(keys) or check_argc(args, 3, 'hg_set_limit')
  if err then return err end
  local limit, rev, dlimit
  limit, err = int_arg(args[1], 'limit', 0, MAX_LIMIT); if err then return err end
  rev, err = int_arg(args[2], 'rev', 1, MAX_SAFE); if err then return err end
  dlimit, err = int_arg(args[3], 'default_limit', 0, MAX_LIMIT); if err then return err end
  local cfg = read_cfg(keys[1])
  if cfg == nil then cfg = create_cfg(keys, dlimit, 0) end
  if rev <= cfg.rev then return { 0, cfg.rev, cfg.limit } end
  redis.call('HSET', keys[1], 'limit', fmt(limit), 'rev', fmt(rev))
  return { 1, rev, limit }
end

-- hg_stats() -> {now, limit, used, epoch, fence, rev, learn_until, want_sum, n,
--                (holder, gen, held, want, exp) * n}; missing cfg: limit = -1, the rest 0.
local function hg_stats(keys, _args)
  local err = check_keys(keys)
  if err then return err end
  local now = now_ms()
  local cfg = read_cfg(keys[1])
  if cfg == nil then return { now, -1, 0, 0, 0, 0, 0, 0, 0 } end
  local out = { now, cfg.limit, cfg.used, cfg.epoch, cfg.fence, cfg.rev, cfg.learn_until,
    cfg.want_sum, 0 }
  local gens = redis.call('HGETALL', keys[3])
  local n = 0
  for i = 1, #gens, 2 do
    local h = gens[i]
    n = n + 1
    out[#out + 1] = h
    out[#out + 1] = tonumber(gens[i + 1])
    out[#out + 1] = tonumber(redis.call('HGET', keys[2], h)) or 0
    out[#out + 1] = tonumber(redis.call('HGET', keys[5], h)) or 0
    out[#out + 1] = tonumber(redis.call('ZSCORE', keys[4], h)) or 0
  end
  out[9] = n
  return out
end

redis.register_function { function_name = 'hg_version', callback = hg_version, flags = { 'no-writes' } }
redis.register_function('hg_sync', hg_sync)
redis.register_function('hg_release', hg_release)
redis.register_function('hg_set_limit', hg_set_limit)
redis.register_function { function_name = 'hg_stats', callback = hg_stats, flags = { 'no-writes' } }
