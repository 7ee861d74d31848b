-- sluice: give back what a committed check consumed (see Policy.Undo in
-- static/algorithm.go), shared by undo.lua and charge.lua (the loader puts
-- this file, after state.lua, before each of them).
--
-- o: the limit's ARGV offset (as check.lua's); key, aux: its KEYS; at: the
-- time the check ran at (µs); cost: what to give back, > 0. The sliding log
-- removes the entries recorded at that time; concurrency removes the
-- request's leases.
local function give_back(o, key, aux, at, cost)
  local FIXED, SLIDING, LOG, TOKEN, LEAKY, GCRA, SEMAPHORE, CONCURRENCY = 1, 2, 3, 4, 5, 6, 7, 8
  local floor, max = math.floor, math.max
  local function wstart(n, w) return n - math.fmod(n, w) end
  local alg, limit, w = tonumber(ARGV[o + 1]), tonumber(ARGV[o + 2]), tonumber(ARGV[o + 3])
  local warmup, lease, sig = tonumber(ARGV[o + 5]), ARGV[o + 10], ARGV[o + 11]
  if cost <= 0 or limit <= 0 then return end
  if alg == CONCURRENCY then
    for j = 1, cost do redis.call('ZREM', aux, lease .. ':' .. j) end
    return
  elseif alg == LOG then
    local members = redis.call('ZRANGEBYSCORE', aux, at, at, 'LIMIT', 0, cost)
    if #members > 0 then redis.call('ZREM', aux, unpack(members)) end
    return
  end
  local v = redis.call('GET', key)
  local vsig, last, a, b, c, f
  if v then vsig, last, a, b, c, f = decode_state(v) end
  if vsig ~= sig or last == nil then return end
  if alg == FIXED then
    if a == wstart(at, w) then b = max(0, b - cost) end
  elseif alg == SLIDING then
    local win = wstart(at, w)
    if win == a then b = max(0, b - cost) elseif win == a - w then c = max(0, c - cost) end
  elseif alg == TOKEN and warmup > 0 then
    f = max(0, f - cost)
  elseif alg == TOKEN or alg == GCRA or alg == LEAKY then
    a = a - cost * floor(w / limit)
  elseif alg == SEMAPHORE then
    if a == (at - math.fmod(at, w)) / w then b = max(0, b - cost) end
  end
  redis.call('SET', key, encode_state(sig, last, a, b, c, f), 'KEEPTTL')
end
