-- sluice: check.lua's decisions for the common algorithms (GCRA, a token
-- bucket without warm-up, the leaky bucket, fixed and sliding windows) with
-- a fraction of its work: one key and two arguments per limit, the policy's
-- derived figures computed once by the client, no closures, and five reply
-- integers per limit. The state is state.lua's (which check.lua and
-- undo.lua are loaded with), inlined here, so that each script reads what
-- the others wrote: a zero byte, five little-endian doubles (last, a, b, c,
-- f) and the signature; the text "sig|last|a|b|c|f" of earlier versions is
-- read too.
--
-- KEYS: one per limit, the state.
-- ARGV[1]: now in microseconds, or 0 to read the server's TIME.
-- ARGV[2..]: two per limit: five little-endian doubles, then the signature
--   (state written under another one is discarded: the rule changed).
--   The doubles:
--   kind: algorithm * 16 + flags (1 nodelay, 4 shadow, 8 dry run);
--         algorithm 1 GCRA or token bucket, 2 fixed, 3 sliding, 4 leaky.
--   p1:   GCRA and leaky: the interval (window / limit); windows: the window.
--   p2:   GCRA: the capacity; windows: the limit; leaky: the burst.
--   cost, reserve (GCRA: a request whose turn comes within it is admitted
--         now with that delay).
-- Reply: { now, then per limit: allowed, remaining, reset_after,
--          retry_after (-1: never), delay }. A limit commits when it allows,
--          is no dry run, and every limit that is not shadow allowed.
local now = tonumber(ARGV[1])
if now == 0 then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end
local floor, ceil, call, match = math.floor, math.ceil, redis.call, string.match
local byte, sub, unpack = string.byte, string.sub, struct.unpack
local BIG = 2 ^ 53 -- beyond it (or NaN) a state number is corrupt
local GCRA, FIXED, SLIDING, LEAKY = 1, 2, 3, 4

local n_limits = #KEYS
local reply, commit
-- One flat table per call, not one per limit; for the common case of one
-- limit both are made at their size (growing a table rehashes it).
if n_limits == 1 then
  reply, commit = { now, 0, 0, 0, 0, 0 }, { false, 0, 0, 0, 0 }
else
  reply, commit = { now }, {}
end
local all_ok = true
for i = 1, n_limits do
  local o = 2 * i
  local kind, p1, p2, cost, reserve = unpack('<ddddd', ARGV[o])
  local flags = kind % 16
  local alg = (kind - flags) / 16
  local sig = ARGV[o + 1]
  local key = KEYS[i]
  local last, a, b, c = 0, 0, 0, 0
  local v = call('GET', key)
  if v then
    local s, l, x, y, z
    if byte(v, 1) == 0 and #v >= 41 then
      l, x, y, z = unpack('<dddd', v, 2)
      s = sub(v, 42)
    else
      s, l, x, y, z = match(v, '^(.-)|([^|]+)|([^|]+)|([^|]+)|([^|]+)|[^|]+$')
      l, x, y, z = tonumber(l), tonumber(x), tonumber(y), tonumber(z)
    end
    if not (l and l > -BIG and l < BIG) then return redis.error_reply('sluice: corrupt state at ' .. key) end
    last = l
    if s == sig then
      if not (x and x > -BIG and x < BIG and y > -BIG and y < BIG and z > -BIG and z < BIG) then
        return redis.error_reply('sluice: corrupt state at ' .. key)
      end
      a, b, c = x, y, z
    end
  end
  local n = now
  if last > n then n = last end
  if cost < 0 then cost = 0 end
  -- ok, remaining, reset_after, retry_after, delay; until: when the state
  -- may expire; na, nb, nc: the state to write.
  local ok, rem, reset, retry, delay, untl = false, 0, 0, 0, 0, n
  local na, nb, nc = a, b, c
  if alg == GCRA then
    local t, cap = p1, p2
    local dvt = t * cap
    local tat = a
    if tat < n then tat = n end
    local ttl = tat - n
    if cost > cap then
      retry, reset, untl = -1, ttl, n + ttl
    else
      local new_tat = tat + t * cost
      local diff = n - (new_tat - dvt)
      if diff < 0 and -diff > reserve then
        retry, reset, untl = -diff, ttl, tat
      else
        if diff < 0 then delay = -diff end
        ok, ttl, untl, na = true, new_tat - n, new_tat, new_tat
        reset = ttl
      end
    end
    local nx = dvt - ttl
    if nx >= 0 then rem = floor(nx / t) end
  elseif alg == FIXED then
    local w, l = p1, p2
    local win = n - n % w
    local count = 0
    if a == win then count = b end
    if cost > l then
      retry, rem = -1, l - count
      if count > 0 then reset = win + w - n end
    elseif count + cost <= l then
      ok, rem, na, nb = true, l - count - cost, win, count + cost
      if count + cost > 0 then reset = win + w - n end
    else
      rem, retry = l - count, win + w - n
      if count > 0 then reset = win + w - n end
    end
    untl = n + reset
  elseif alg == SLIDING then
    local w, l = p1, p2
    local win = n - n % w
    local cur, prev = b, c
    if a == win then
    elseif a == win - w then prev, cur = cur, 0
    else prev, cur = 0, 0 end
    local est = prev * ((w - (n - win)) / w) + cur
    local used = cur
    if cost > l then
      retry, rem = -1, floor(l - est)
    elseif est + cost <= l then
      ok, rem, used, na, nb, nc = true, floor(l - est - cost), cur + cost, win, cur + cost, prev
    else
      rem = floor(l - est)
      if cur + cost <= l then
        retry = win + ceil(w * (1 - (l - (cur + cost)) / prev)) - n
      else
        retry = win + w + ceil(w * (1 - (l - cost) / cur)) - n
      end
      if retry < 1 then retry = 1 end
    end
    if used > 0 then reset = win + 2 * w - n elseif prev > 0 then reset = win + w - n end
    untl = n + reset
  elseif alg == LEAKY then
    local t, burst = p1, p2
    local room = burst * t
    local wt = a + t - n
    if wt < 0 then wt = 0 end
    if wt <= room then rem = floor((room - wt) / t) + 1 end
    reset, untl = wt, n + wt
    if cost > burst + 1 then
      retry = -1
    elseif cost == 0 then
      ok = true
    else
      local start = a + t
      if start < n then start = n end
      local lst = start + (cost - 1) * t
      if lst - n > room then
        retry = lst - n - room
      else
        ok, reset, untl, na = true, lst + t - n, lst + t, lst
        if flags % 2 == 0 then delay = start - n end
        wt = lst + t - n
        rem = 0
        if wt <= room then rem = floor((room - wt) / t) + 1 end
      end
    end
  else
    return redis.error_reply('sluice: unknown algorithm ' .. tostring(alg))
  end
  if rem < 0 then rem = 0 end
  if not ok and flags % 8 < 4 then all_ok = false end
  if ok and flags < 8 then
    local ms = ceil((untl - n) / 1000)
    if ms < 1 then ms = 1 end
    local ci = 5 * i -- commit holds, per limit, the SET's PX and the state
    commit[ci - 4], commit[ci - 3], commit[ci - 2], commit[ci - 1], commit[ci] = ms + 1000, n, na, nb, nc
  end
  local r = 5 * i - 4
  reply[r + 1], reply[r + 2], reply[r + 3], reply[r + 4], reply[r + 5] = ok and 1 or 0, floor(rem), floor(reset), floor(retry), floor(delay)
end

if all_ok then
  for i = 1, n_limits do
    local ci = 5 * i
    local px = commit[ci - 4]
    if px then
      call('SET', KEYS[i], struct.pack('<Bddddd', 0, commit[ci - 3], commit[ci - 2], commit[ci - 1], commit[ci], 0) .. ARGV[2 * i + 1], 'PX', px)
    end
  end
end
return reply
