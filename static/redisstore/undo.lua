-- sluice: give back what a committed check consumed (see Policy.Undo in
-- static/algorithm.go). Used to refund the slots of a request that another
-- slot denied, and for requests abandoned during their delay.
--
-- KEYS, ARGV[3..]: as check.lua. ARGV[1]: the time the check ran at (µs).
local STRIDE = 10
local at = tonumber(ARGV[1])
local floor, max = math.floor, math.max
local FIXED, SLIDING, LOG, TOKEN, LEAKY, GCRA, SEMAPHORE, CONCURRENCY = 1, 2, 3, 4, 5, 6, 7, 8
local function wstart(n, w) return n - math.fmod(n, w) end

for i = 1, #KEYS / 2 do
  local o = 2 + (i - 1) * STRIDE
  local alg, limit, w = tonumber(ARGV[o + 1]), tonumber(ARGV[o + 2]), tonumber(ARGV[o + 3])
  local warmup, cost, lease = tonumber(ARGV[o + 5]), tonumber(ARGV[o + 9]), ARGV[o + 10]
  local sig = table.concat({ ARGV[o + 1], ARGV[o + 2], ARGV[o + 3], ARGV[o + 4], ARGV[o + 5], math.fmod(tonumber(ARGV[o + 6]), 4), ARGV[o + 7], ARGV[o + 8] }, ':')
  local key, aux = KEYS[2 * i - 1], KEYS[2 * i]
  if cost > 0 and limit > 0 then
    if alg == CONCURRENCY then
      for j = 1, cost do redis.call('ZREM', aux, lease .. ':' .. j) end
    elseif redis.call('HGET', key, 'p') == sig then
      local h = redis.call('HMGET', key, 'a', 'b', 'c', 'f')
      local a, b, c, f = tonumber(h[1]) or 0, tonumber(h[2]) or 0, tonumber(h[3]) or 0, tonumber(h[4]) or 0
      if alg == FIXED then
        if a == wstart(at, w) then redis.call('HSET', key, 'b', max(0, b - cost)) end
      elseif alg == SLIDING then
        local win = wstart(at, w)
        if win == a then redis.call('HSET', key, 'b', max(0, b - cost))
        elseif win == a - w then redis.call('HSET', key, 'c', max(0, c - cost)) end
      elseif alg == LOG then
        local members = redis.call('ZRANGEBYSCORE', aux, at, at, 'LIMIT', 0, cost)
        if #members > 0 then redis.call('ZREM', aux, unpack(members)) end
      elseif alg == TOKEN and warmup > 0 then
        redis.call('HSET', key, 'f', string.format('%.17g', max(0, f - cost)))
      elseif alg == TOKEN or alg == GCRA or alg == LEAKY then
        redis.call('HSET', key, 'a', a - cost * floor(w / limit))
      elseif alg == SEMAPHORE then
        if a == (at - math.fmod(at, w)) / w then redis.call('HSET', key, 'b', max(0, b - cost)) end
      end
    end
  end
end
return 1
