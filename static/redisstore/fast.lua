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
-- Expiry. A key outlives its state by a second (the PX of each write).
-- Setting an expiry costs Redis about a fifth of this script's CPU, so a
-- write sets one only when the key's life must grow, and then with room
-- to spare (twice what is needed, at most a minute more); other writes keep
-- the key's TTL. To know the TTL without asking, f holds when the key
-- expires, in whole milliseconds after last, times 2^20, plus last's low 20
-- bits (microseconds). A writer that does not keep f up to date (check.lua
-- and charge.lua, which write f = 0, or those of an earlier version, which
-- carry f but move last on) leaves a tag that no longer matches last, and
-- the next write here sets an expiry again. Only when the server's clock
-- is used (ARGV[1] = 0): a client's clock is not the one keys expire by.
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
local server = now == 0 -- the server's clock, which keys expire by
if server then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end
local floor, ceil, min, call, match = math.floor, math.ceil, math.min, redis.call, string.match
local byte, sub, unpack = string.byte, string.sub, struct.unpack
local BIG = 2 ^ 53 -- beyond it (or NaN) a state number is corrupt
local TAG = 2 ^ 20 -- f: expiry in ms after last * TAG + last % TAG
local MAXREL = 2 ^ 33 -- expiries further than this (ms, 99 days) are not kept
local SLACK = 10000 -- µs an expiry is taken to be earlier than set, for safety
local GCRA, FIXED, SLIDING, LEAKY = 1, 2, 3, 4

-- set writes a limit's state; px 0 keeps the key's TTL.
local function set(key, px, n, a, b, c, f, sig)
  local state = struct.pack('<Bddddd', 0, n, a, b, c, f) .. sig
  if px > 0 then call('SET', key, state, 'PX', px) else call('SET', key, state, 'KEEPTTL') end
end

local n_limits = #KEYS
local reply, commit
-- One flat table per call, not one per limit. One limit commits as soon as
-- it is decided (it allowed) and needs no commit table; its reply is made
-- at its size (growing a table rehashes it).
if n_limits == 1 then
  reply = { now, 0, 0, 0, 0, 0 }
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
  local expires = 0 -- when the key is known to expire (µs), 0 if unknown
  local v = call('GET', key)
  if v then
    local s, l, x, y, z, e
    if byte(v, 1) == 0 and #v >= 41 then
      l, x, y, z, e = unpack('<ddddd', v, 2)
      s = sub(v, 42)
    else
      s, l, x, y, z = match(v, '^(.-)|([^|]+)|([^|]+)|([^|]+)|([^|]+)|[^|]+$')
      l, x, y, z = tonumber(l), tonumber(x), tonumber(y), tonumber(z)
    end
    if not (l and l > -BIG and l < BIG) then return redis.error_reply('sluice: corrupt state at ' .. key) end
    last = l
    if server and e and e > 0 and e < BIG then
      local tag = e % TAG
      if tag == l % TAG then expires = l + (e - tag) / TAG * 1000 end
    end
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
    ms = ms + 1000
    local px = 0 -- 0: keep the key's TTL
    if not server or expires < now + ms * 1000 then
      px = ms + min(ms, 60000)
      expires = now + px * 1000 - SLACK
    end
    local f = 0
    local rel = floor((expires - n) / 1000)
    if server and rel >= 0 and rel < MAXREL then f = rel * TAG + n % TAG end
    if n_limits == 1 then
      set(key, px, n, na, nb, nc, f, sig)
    else
      local ci = 6 * i -- commit holds, per limit, the SET's PX and the state
      commit[ci - 5], commit[ci - 4], commit[ci - 3], commit[ci - 2], commit[ci - 1], commit[ci] = px, n, na, nb, nc, f
    end
  end
  -- No floor: every figure is whole (the client sends whole microseconds
  -- and costs, TIME is whole) or, from a state written by hand, not
  -- negative, which Redis's reply truncates as floor would.
  local r = 5 * i - 4
  reply[r + 1], reply[r + 2], reply[r + 3], reply[r + 4], reply[r + 5] = ok and 1 or 0, rem, reset, retry, delay
end

if commit and all_ok then
  for i = 1, n_limits do
    local ci = 6 * i
    local px = commit[ci - 5]
    if px then
      set(KEYS[i], px, commit[ci - 4], commit[ci - 3], commit[ci - 2], commit[ci - 1], commit[ci], ARGV[2 * i + 1])
    end
  end
end
return reply
