-- sluice: a key's state, shared by check.lua and undo.lua (the loader puts
-- this file before each of them; fast.lua inlines the same for speed).
-- One string per key: a zero byte, five little-endian doubles (last, a, b,
-- c, f), then the signature; the text "sig|last|a|b|c|f" of earlier
-- versions is read too. f is a warming bucket's; for fast.lua's algorithms
-- it is that script's note of when the key expires, which the others, as
-- they set an expiry of their own, write as 0.
local STATE_BIG = 2 ^ 53 -- beyond it (or NaN) a state number is corrupt

-- decode_state returns a state's signature and numbers, or nil when corrupt.
local function decode_state(v)
  local sig, last, a, b, c, f
  if string.byte(v, 1) == 0 and #v >= 41 then
    last, a, b, c, f = struct.unpack('<ddddd', v, 2)
    sig = string.sub(v, 42)
  else
    sig, last, a, b, c, f = string.match(v, '^(.-)|([^|]+)|([^|]+)|([^|]+)|([^|]+)|([^|]+)$')
    last, a, b, c, f = tonumber(last), tonumber(a), tonumber(b), tonumber(c), tonumber(f)
  end
  for _, x in ipairs({ last, a, b, c, f }) do
    if not (x and x > -STATE_BIG and x < STATE_BIG) then return nil end
  end
  return sig, last, a, b, c, f
end

-- encode_state is decode_state's inverse.
local function encode_state(sig, last, a, b, c, f)
  return struct.pack('<Bddddd', 0, last, a, b, c, f) .. sig
end

