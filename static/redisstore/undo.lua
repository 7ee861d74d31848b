-- sluice: give back what a committed check consumed (give_back in
-- giveback.lua). Used to refund the slots of a request that another slot
-- denied, and for requests abandoned during their delay.
--
-- KEYS, ARGV[3..]: as check.lua. ARGV[1]: the time the check ran at (µs).
local STRIDE = 12
local at = tonumber(ARGV[1])
for i = 1, #KEYS / 2 do
  local o = 2 + (i - 1) * STRIDE
  give_back(o, KEYS[2 * i - 1], KEYS[2 * i], at, tonumber(ARGV[o + 9]))
end
return 1
