-- sluice: share one global limit among regions (static/region). Runs on
-- the home region's Redis, atomically.
-- KEYS[1]: the rule's hash. Fields: "n|<region>|<node>" =
--   "rate|seen|applied|used" (what each sidecar reported), "b|<region>" =
--   the region's budget.
-- ARGV: limit, region, node, rate (demand per second seen by the node),
--   applied (the budget the node enforces now), stale (microseconds after
--   which a node's demand no longer counts), forget (microseconds after
--   which a silent node is dropped: at least the window), used (the most of
--   the budget a key of the region was seen to use in the last window),
--   then every region's name.
-- Returns this region's budget.
local key = KEYS[1]
local limit = tonumber(ARGV[1])
local region, node = ARGV[2], ARGV[3]
local rate, applied = tonumber(ARGV[4]), tonumber(ARGV[5])
local stale, forget, used = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local regions = {}
for i = 9, #ARGV do regions[#regions + 1] = ARGV[i] end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

redis.call('HSET', key, 'n|' .. region .. '|' .. node, string.format('%.17g|%d|%d|%d', rate, now, applied, used))

local demand, held, budget = {}, {}, {}
for _, r in ipairs(regions) do demand[r], held[r] = 0, 0 end
local all = redis.call('HGETALL', key)
for i = 1, #all, 2 do
  local f, v = all[i], all[i + 1]
  local kind, r = string.match(f, '^(%a)|([^|]+)')
  if kind == 'n' and demand[r] ~= nil then
    local nr, seen, ap, us = string.match(v, '^([^|]+)|([^|]+)|([^|]+)|([^|]+)$')
    if nr == nil then
      -- A report of a sidecar from before use was reported.
      nr, seen, ap = string.match(v, '^([^|]+)|([^|]+)|([^|]+)$')
      us = 0
    end
    seen = tonumber(seen)
    if seen == nil or now - seen > forget then
      redis.call('HDEL', key, f)
    else
      if now - seen <= stale then demand[r] = demand[r] + tonumber(nr) end
      -- What a region enforces, or used in the window, is held: its
      -- sidecars share one store, so the use each saw is the region's.
      held[r] = math.max(held[r], tonumber(ap), tonumber(us))
    end
  elseif kind == 'b' and demand[r] ~= nil then
    budget[r] = tonumber(v)
  end
end

-- A first call splits the limit evenly (the remainder to the first regions).
local n = #regions
if budget[region] == nil then
  local sum = 0
  for _, r in ipairs(regions) do if budget[r] ~= nil then sum = sum + budget[r] end end
  local even = math.floor(limit / n)
  local idx = 0
  for i, r in ipairs(regions) do if r == region then idx = i end end
  local share = even
  if idx <= limit - even * n then share = share + 1 end
  budget[region] = math.max(0, math.min(share, limit - sum))
end

-- The target follows demand, every region keeping a floor of a twentieth
-- of the even split so that it can show demand again.
local total = 0
for _, r in ipairs(regions) do total = total + demand[r] end
local target
if total <= 0 then
  target = math.floor(limit / n)
else
  local floor = limit / n / 20
  target = math.floor(floor + (limit - floor * n) * demand[region] / total)
end

-- Lower at once; raise only into room no other region holds or may still
-- enforce (its budget, the budget its sidecars last reported applying, or
-- what it already admitted in the window).
local mine = budget[region]
if target < mine then
  mine = target
elseif target > mine then
  local others = 0
  for _, r in ipairs(regions) do
    if r ~= region then others = others + math.max(budget[r] or 0, held[r]) end
  end
  mine = math.max(mine, math.min(target, limit - others))
end
mine = math.max(0, math.min(mine, limit))
redis.call('HSET', key, 'b|' .. region, mine)
redis.call('PEXPIRE', key, math.floor(forget / 1000) * 10)
return mine
