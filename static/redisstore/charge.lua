-- sluice: record usage learned after a request was admitted (a cost its
-- response stated). A positive cost is added now, past the limit if need
-- be and never denied, as Policy.Absorb in static/algorithm.go adds it; a
-- negative one gives back what the check at ARGV[1] took (give_back).
--
-- KEYS, ARGV[3..]: as check.lua (the lease names a sliding log's entries).
-- ARGV[1]: the time the check ran at (µs). ARGV[2]: now (µs), or 0 to read
-- the server's TIME. Concurrency limits and warm-up token buckets are not
-- charged (the caller refuses them).
local STRIDE = 12
local MARGIN = 1000000 -- keys outlive their state by a second
local FIXED, SLIDING, LOG, TOKEN, LEAKY, GCRA, SEMAPHORE = 1, 2, 3, 4, 5, 6, 7
local floor, ceil, max, min = math.floor, math.ceil, math.max, math.min
local function wstart(n, w) return n - math.fmod(n, w) end

local at, now = tonumber(ARGV[1]), tonumber(ARGV[2])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- add records cost at n into a key's numbers; it returns them and when the
-- key is whole again (µs), or nil when the usage is older than the state.
local function add(alg, limit, w, cost, n, a, b, c)
  if alg == FIXED then
    local win = wstart(n, w)
    if win == a then b = b + cost elseif win > a then a, b = win, cost end
    return a, b, c, a + w
  elseif alg == SLIDING then
    local win = wstart(n, w)
    if win == a then b = b + cost
    elseif win == a - w then c = c + cost
    elseif win == a + w then a, b, c = win, cost, b
    elseif win > a then a, b, c = win, cost, 0 end
    return a, b, c, a + 2 * w
  elseif alg == TOKEN or alg == GCRA then
    a = max(a, n) + cost * floor(w / limit)
    return a, b, c, a
  elseif alg == LEAKY then
    local t = floor(w / limit)
    a = max(a, n - t) + cost * t
    return a, b, c, a + t
  elseif alg == SEMAPHORE then
    local cycle = (n - math.fmod(n, w)) / w
    if cycle == a then b = b + cost
    elseif cycle > a then
      local used = b - (cycle - a) * limit
      a, b = cycle, max(0, used) + cost
    else return nil end
    return a, b, c, (a + floor((b + limit - 1) / limit)) * w
  end
  return nil
end

for i = 1, #KEYS / 2 do
  local o = 2 + (i - 1) * STRIDE
  local key, aux = KEYS[2 * i - 1], KEYS[2 * i]
  local alg, limit, w = tonumber(ARGV[o + 1]), tonumber(ARGV[o + 2]), tonumber(ARGV[o + 3])
  local cost, lease, sig = tonumber(ARGV[o + 9]), ARGV[o + 10], ARGV[o + 11]
  if cost < 0 then
    give_back(o, key, aux, at, -cost)
  elseif cost > 0 and limit > 0 and not (alg == TOKEN and tonumber(ARGV[o + 5]) > 0) then
    local last, a, b, c = 0, 0, 0, 0
    local v = redis.call('GET', key)
    if v then
      local vsig, l2, a2, b2, c2 = decode_state(v)
      if l2 == nil then return redis.error_reply('sluice: corrupt state at ' .. key) end
      last = l2
      if vsig == sig then a, b, c = a2, b2, c2 elseif alg == LOG then redis.call('DEL', aux) end
    end
    local n = max(now, last)
    local untl
    if alg == LOG then
      -- As a check records: cost entries (at most the limit) at the
      -- newest time held, the oldest dropped past the limit.
      local minint = tonumber(ARGV[o + 7])
      redis.call('ZREMRANGEBYSCORE', aux, '-inf', n - w)
      local newest = redis.call('ZRANGE', aux, -1, -1, 'WITHSCORES')
      local t = n
      if #newest == 2 then t = max(t, tonumber(newest[2])) end
      for j = 1, min(cost, limit) do redis.call('ZADD', aux, t, lease .. ':' .. j) end
      redis.call('ZREMRANGEBYRANK', aux, 0, -(limit + 1))
      untl = t + max(w, minint)
      redis.call('PEXPIRE', aux, max(1, ceil((untl - n) / 1000)) + floor(MARGIN / 1000))
    else
      a, b, c, untl = add(alg, limit, w, cost, n, a, b, c)
    end
    if untl ~= nil then
      local ttl = max(1, ceil((untl - n) / 1000)) + floor(MARGIN / 1000)
      -- f: 0, as check.lua writes it (warming buckets are not charged).
      redis.call('SET', key, encode_state(sig, n, a, b, c, 0), 'PX', ttl)
    end
  end
end
return 1
