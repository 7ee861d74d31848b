-- sluice: check every limit of one request whose keys share a hash slot,
-- atomically and all-or-nothing. Mirrors static/algorithm.go, in microseconds.
--
-- KEYS: two per limit: the state hash, and the auxiliary sorted set (the
--       sliding log's timestamps, or the concurrency limit's leases).
-- ARGV[1]: now in microseconds, or 0 to read the server's TIME.
-- ARGV[2]: concurrency lease lifetime, microseconds.
-- ARGV[3..]: STRIDE per limit: algorithm, limit, window, burst, warmup, flags,
--       min_interval, timeout, cost, lease, signature, reserve (a token
--       bucket's or GCRA's request whose turn comes within it is admitted
--       now with that delay, its tokens taken in advance). Durations in
--       microseconds. flags: 1 nodelay, 2 count_blocked, 4 shadow, 8 dry run
--       (evaluate, never commit). The
--       signature identifies the policy: state written under another one is
--       discarded (the rule changed).
-- State: one string per key (state.lua), written with SET PX.
-- Reply: { now, then REPLY per limit: allowed, capacity, remaining,
--       reset_after, retry_after (-1: never), delay, committed }.
local STRIDE = 12
local MARGIN = 1000000 -- keys outlive their state by a second

local now = tonumber(ARGV[1])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local lease_ttl = tonumber(ARGV[2])

local FIXED, SLIDING, LOG, TOKEN, LEAKY, GCRA, SEMAPHORE, CONCURRENCY = 1, 2, 3, 4, 5, 6, 7, 8

local floor, ceil, max, min = math.floor, math.ceil, math.max, math.min
local function wstart(n, w) return n - math.fmod(n, w) end
local function has(flags, bit) return math.fmod(floor(flags / bit), 2) == 1 end

local function capacity(p)
  if p.limit == 0 then return 0 end
  if p.alg == TOKEN then
    if p.burst > 0 then return p.burst end
    return p.limit
  elseif p.alg == LEAKY or p.alg == GCRA then
    return p.burst + 1
  end
  return p.limit
end

-- r: ok, rem, reset, retry, delay, untl, cob (commit on deny), set (fields),
-- record (log entries), cap.
local function never(n, rem, reset)
  return { ok = false, rem = rem, reset = reset, retry = -1, delay = 0, untl = n + reset }
end

local function fixed(p, st, n, cost)
  local w = p.window
  local win = wstart(n, w)
  local count = 0
  if st.a == win then count = st.b end
  local function rst(c) if c > 0 then return win + w - n end return 0 end
  if count + cost <= p.limit then
    local r = rst(count + cost)
    return { ok = true, rem = p.limit - count - cost, reset = r, retry = 0, delay = 0, untl = n + r,
             set = { a = win, b = count + cost }, cob = p.count_blocked and cost > 0 }
  end
  if p.count_blocked and cost > 0 then
    -- Refused hits count too (envoyproxy/ratelimit's counting).
    local r = rst(count + cost)
    local retry = win + w - n
    if cost > p.limit then retry = -1 end -- no retry of this cost can pass
    return { ok = false, rem = 0, reset = r, retry = retry, delay = 0, untl = n + r,
             set = { a = win, b = count + cost }, cob = true }
  end
  if cost > p.limit then return never(n, p.limit - count, rst(count)) end
  local r = rst(count)
  return { ok = false, rem = p.limit - count, reset = r, retry = win + w - n, delay = 0, untl = n + r }
end

local function sliding(p, st, n, cost)
  local w = p.window
  local win = wstart(n, w)
  local cur, prev = st.b, st.c
  if st.a == win then
  elseif st.a == win - w then prev, cur = cur, 0
  else prev, cur = 0, 0 end
  local est = prev * ((w - (n - win)) / w) + cur
  local function rst(c, pr)
    if c > 0 then return win + 2 * w - n elseif pr > 0 then return win + w - n end
    return 0
  end
  local l = p.limit
  if cost > l then return never(n, floor(l - est), rst(cur, prev)) end
  if est + cost <= l then
    local r = rst(cur + cost, prev)
    return { ok = true, rem = floor(l - est - cost), reset = r, retry = 0, delay = 0, untl = n + r,
             set = { a = win, b = cur + cost, c = prev } }
  end
  local retry
  if cur + cost <= l then
    retry = win + ceil(w * (1 - (l - (cur + cost)) / prev)) - n
  else
    retry = win + w + ceil(w * (1 - (l - cost) / cur)) - n
  end
  local r = rst(cur, prev)
  return { ok = false, rem = floor(l - est), reset = r, retry = max(retry, 1), delay = 0, untl = n + r }
end

local function slog(p, st, n, cost, aux)
  local w = p.window
  local mi = p.min_interval
  -- Expired entries are skipped, not removed: a denied check commits
  -- nothing, and a clock that steps back must find what it saw. Phase 2
  -- drops them when it commits.
  local skip = redis.call('ZCOUNT', aux, '-inf', n - w)
  local count = redis.call('ZCARD', aux) - skip
  local newest
  if count > 0 then newest = tonumber(redis.call('ZRANGE', aux, -1, -1, 'WITHSCORES')[2]) end
  local function at(i) return tonumber(redis.call('ZRANGE', aux, skip + i, skip + i, 'WITHSCORES')[2]) end
  local function untl()
    if newest == nil then return n end
    return newest + max(w, mi)
  end
  if cost > p.limit then return never(n, p.limit - count, untl() - n) end
  local blocked_by_interval = newest ~= nil and mi > 0 and cost > 0 and n - newest < mi
  if count + cost <= p.limit and not blocked_by_interval then
    local u = untl()
    if cost > 0 then u = n + max(w, mi) end
    return { ok = true, rem = p.limit - count - cost, reset = u - n, retry = 0, delay = 0, untl = u,
             record = cost, cob = p.count_blocked and cost > 0 }
  end
  if not p.count_blocked then
    local u = untl()
    local t = n
    local over = count + cost - p.limit
    if over > 0 then t = max(t, at(over - 1) + w) end
    if newest ~= nil and mi > 0 then t = max(t, newest + mi) end
    return { ok = false, rem = p.limit - count, reset = u - n, retry = t - n, delay = 0, untl = u }
  end
  -- The blocked attempt is recorded; answer for the log after it.
  local after = min(count + cost, p.limit)
  local dropped = count + cost - after
  local t = n
  local over = after + cost - p.limit
  if over > 0 then
    local idx = dropped + over - 1
    if idx < count then t = at(idx) + w else t = n + w end
  end
  if mi > 0 then t = max(t, n + mi) end
  local u = n + max(w, mi)
  return { ok = false, rem = p.limit - after, reset = u - n, retry = t - n, delay = 0, untl = u,
           record = cost, cob = true }
end

local function rem_gcra(dvt, ttl, t)
  local nx = dvt - ttl
  if nx > -t and nx >= 0 then return floor(nx / t) end
  return 0
end

local function gcra(p, st, n, cost, cap)
  -- Time is kept in whole microseconds: an interval between two of them
  -- rounds up (a little under the rate, never over it).
  local t = ceil(p.window / p.limit)
  local dvt = t * cap
  local tat = max(st.a, n)
  if cost > cap then
    local ttl = tat - n
    return never(n, rem_gcra(dvt, ttl, t), ttl)
  end
  local new_tat = tat + t * cost
  local diff = n - (new_tat - dvt)
  local delay = 0
  if diff < 0 then
    if -diff > (p.reserve or 0) then
      local ttl = tat - n
      return { ok = false, rem = rem_gcra(dvt, ttl, t), reset = ttl, retry = -diff, delay = 0, untl = tat }
    end
    delay = -diff -- reserved: taken now, held until its turn
  end
  local ttl = new_tat - n
  return { ok = true, rem = rem_gcra(dvt, ttl, t), reset = ttl, retry = 0, delay = delay, untl = new_tat,
           set = { a = new_tat } }
end

local function warming(p, st, n, cost)
  local stable = p.window / p.limit
  local warm = p.warmup
  local maxp = warm / stable
  local threshold = 0.5 * warm / stable
  local slope = (3 * stable - stable) / (maxp - threshold)
  local stored = maxp - st.f
  local next_free = st.a
  if n > next_free then
    stored = min(maxp, stored + (n - next_free) / stable)
    next_free = n
  end
  local function whole(nf, s) return nf + ceil((maxp - s) * stable) end
  if next_free > n then
    local u = whole(next_free, stored)
    return { ok = false, cap = p.limit, rem = 0, reset = u - n, retry = next_free - n, delay = 0, untl = u }
  end
  local spend = min(cost, stored)
  local fresh = cost - spend
  local wait
  local above = stored - threshold
  if above > 0 then
    local take = min(above, spend)
    local function to_time(x) return stable + x * slope end
    wait = take * (to_time(above) + to_time(above - take)) / 2 + stable * (spend - take)
  else
    wait = stable * spend
  end
  wait = wait + fresh * stable
  next_free = next_free + ceil(wait)
  stored = stored - spend
  local u = whole(next_free, stored)
  local rem = 0
  if next_free <= n then rem = floor(stored) end
  return { ok = true, cap = p.limit, rem = min(rem, p.limit), reset = u - n, retry = 0, delay = 0, untl = u,
           set = { a = next_free, f = maxp - stored } }
end

local function leaky(p, st, n, cost)
  local t = ceil(p.window / p.limit) -- rounded up, as gcra's
  local room = p.burst * t
  local function remaining(last)
    local wt = max(0, last + t - n)
    if wt <= room then return floor((room - wt) / t) + 1 end
    return 0
  end
  local ttl = max(0, st.a + t - n)
  if cost > p.burst + 1 then return never(n, remaining(st.a), ttl) end
  if cost == 0 then
    return { ok = true, rem = remaining(st.a), reset = ttl, retry = 0, delay = 0, untl = n + ttl }
  end
  local start = max(n, st.a + t)
  local last = start + (cost - 1) * t
  if last - n > room then
    return { ok = false, rem = remaining(st.a), reset = ttl, retry = last - n - room, delay = 0, untl = n + ttl }
  end
  local delay = start - n
  if p.nodelay then delay = 0 end
  return { ok = true, rem = remaining(last), reset = last + t - n, retry = 0, delay = delay, untl = last + t,
           set = { a = last } }
end

local function semaphore(p, st, n, cost)
  local w = p.window
  local l = p.limit
  local cycle = (n - math.fmod(n, w)) / w
  local used = st.b
  local gone = cycle - st.a
  if gone > 0 then
    if gone > floor(used / l) then used = 0 else used = used - gone * l end
  end
  if used < 0 then used = 0 end
  local function reset_at(u)
    if u == 0 then return n end
    return (cycle + ceil(u / l)) * w
  end
  if cost > l then return never(n, max(0, l - used), reset_at(used) - n) end
  local k = floor(used / l)
  local filled = math.fmod(used, l)
  local after = used + cost
  if filled + cost > l then
    k = k + 1
    after = k * l + cost
  end
  local wait = 0
  if k > 0 then wait = (cycle + k) * w - n end
  if wait <= p.timeout then
    local ra = reset_at(after)
    return { ok = true, rem = max(0, l - after), reset = ra - n, retry = 0, delay = wait, untl = ra,
             set = { a = cycle, b = after } }
  end
  local ra = reset_at(used)
  return { ok = false, rem = max(0, l - used), reset = ra - n, retry = wait, delay = 0, untl = ra }
end

local function concurrency(p, n, cost, aux)
  redis.call('ZREMRANGEBYSCORE', aux, '-inf', n)
  local inflight = redis.call('ZCARD', aux)
  if cost > p.limit then return never(n, max(0, p.limit - inflight), 0) end
  if inflight + cost <= p.limit then
    return { ok = true, rem = p.limit - inflight - cost, reset = 0, retry = 0, delay = 0, untl = n, lease = cost }
  end
  return { ok = false, rem = max(0, p.limit - inflight), reset = 0, retry = 1000000, delay = 0, untl = n,
           concurrency = true }
end

-- Phase 1: evaluate every limit.
local nlim = #KEYS / 2
local ps, rs = {}, {}
local enforced_ok = true
for i = 1, nlim do
  local o = 2 + (i - 1) * STRIDE
  -- Parse only what the algorithm reads: ARGV conversions dominate the
  -- script's cost after the commands themselves.
  local alg = tonumber(ARGV[o + 1])
  local p = { alg = alg, limit = tonumber(ARGV[o + 2]), cost = tonumber(ARGV[o + 9]), lease = ARGV[o + 10],
              sig = ARGV[o + 11], burst = 0, warmup = 0, min_interval = 0, timeout = 0 }
  if alg ~= CONCURRENCY then p.window = tonumber(ARGV[o + 3]) end
  if alg == TOKEN or alg == LEAKY or alg == GCRA then p.burst = tonumber(ARGV[o + 4]) end
  if alg == TOKEN or alg == GCRA then p.reserve = tonumber(ARGV[o + 12]) else p.reserve = 0 end
  if alg == TOKEN then p.warmup = tonumber(ARGV[o + 5]) end
  if alg == LOG then p.min_interval = tonumber(ARGV[o + 7]) end
  if alg == SEMAPHORE or alg == CONCURRENCY then p.timeout = tonumber(ARGV[o + 8]) end
  local flags = ARGV[o + 6]
  if flags ~= '0' then
    flags = tonumber(flags)
    p.nodelay, p.count_blocked, p.shadow, p.dry = has(flags, 1), has(flags, 2), has(flags, 4), has(flags, 8)
  end
  p.key, p.aux = KEYS[2 * i - 1], KEYS[2 * i]
  local st = { last = 0, a = 0, b = 0, c = 0, f = 0 }
  if p.alg ~= CONCURRENCY then
    local v = redis.call('GET', p.key)
    if v then
      local sig, last, a, b, c, f = decode_state(v)
      if last == nil then return redis.error_reply('sluice: corrupt state at ' .. p.key) end
      st.last = last
      if sig == p.sig then
        st.a, st.b, st.c, st.f = a, b, c, f
      elseif p.alg == LOG then
        redis.call('DEL', p.aux) -- the rule changed: start afresh
      end
    end
  end
  local n = max(now, st.last)
  local cost = max(p.cost, 0)
  local cap = capacity(p)
  local r
  if p.limit == 0 then
    r = never(n, 0, 0)
    if cost == 0 then r.ok = true end
  elseif p.alg == FIXED then r = fixed(p, st, n, cost)
  elseif p.alg == SLIDING then r = sliding(p, st, n, cost)
  elseif p.alg == LOG then r = slog(p, st, n, cost, p.aux)
  elseif p.alg == TOKEN then
    if p.warmup > 0 then r = warming(p, st, n, cost) else r = gcra(p, st, n, cost, cap) end
  elseif p.alg == GCRA then r = gcra(p, st, n, cost, cap)
  elseif p.alg == LEAKY then r = leaky(p, st, n, cost)
  elseif p.alg == SEMAPHORE then r = semaphore(p, st, n, cost)
  elseif p.alg == CONCURRENCY then r = concurrency(p, n, cost, p.aux)
  else return redis.error_reply('sluice: unknown algorithm ' .. tostring(p.alg)) end
  r.cap = r.cap or cap
  r.n = n
  r.st = st
  if r.rem < 0 then r.rem = 0 end
  if not r.ok and not p.shadow then enforced_ok = false end
  p.cost = cost
  ps[i], rs[i] = p, r
end

-- Phase 2: commit all or nothing (count_blocked logs record regardless).
local reply = { now }
for i = 1, nlim do
  local p, r = ps[i], rs[i]
  local commit = ((enforced_ok and r.ok) or r.cob) and not p.dry
  if commit then
    local ttl = max(1, ceil((r.untl - r.n) / 1000)) + floor(MARGIN / 1000)
    if p.alg == LOG then
      redis.call('ZREMRANGEBYSCORE', p.aux, '-inf', r.n - p.window)
    end
    if r.record and r.record > 0 then
      for j = 1, r.record do
        redis.call('ZADD', p.aux, r.n, p.lease .. ':' .. j)
      end
      redis.call('ZREMRANGEBYRANK', p.aux, 0, -(p.limit + 1))
      redis.call('PEXPIRE', p.aux, ttl)
    end
    if r.lease and r.lease > 0 then
      for j = 1, r.lease do
        redis.call('ZADD', p.aux, r.n + lease_ttl, p.lease .. ':' .. j)
      end
      redis.call('PEXPIRE', p.aux, ceil(lease_ttl / 1000) + floor(MARGIN / 1000))
    end
    if p.alg ~= CONCURRENCY then
      local s = r.set or {}
      local st = r.st
      -- f is a warming bucket's; for the others it is fast.lua's note of
      -- when the key expires, which this write's PX makes wrong: 0.
      local f = s.f or (p.alg == TOKEN and p.warmup > 0 and st.f) or 0
      redis.call('SET', p.key, encode_state(p.sig, r.n, s.a or st.a, s.b or st.b, s.c or st.c, f), 'PX', ttl)
    end
  end
  local allowed, committed = 0, 0
  if r.ok then allowed = 1 end
  if commit then committed = 1 end
  local flag = 0
  if r.concurrency then flag = 1 end
  reply[#reply + 1] = allowed
  reply[#reply + 1] = r.cap
  reply[#reply + 1] = floor(r.rem)
  reply[#reply + 1] = floor(r.reset)
  reply[#reply + 1] = floor(r.retry)
  reply[#reply + 1] = floor(r.delay)
  reply[#reply + 1] = committed + 2 * flag
end
return reply
