-- Many bits of one key at once (settling, placing a batch of items: a fill,
-- a read's arrivals), after _bits.lua: one command for the batch where the
-- per-bit helpers send one or more per bit, in whichever form the key is.
-- The form rules are _bits.lua's, checked once for the batch (with its
-- highest offset when it sets bits).

-- One BITFIELD over a bitmap: GET each offset's bit (value nil), or SET
-- each to value. Answers BITFIELD's reply, a number per offset.
local function bitfield(key, offs, value)
  local ops = {}
  for _, off in ipairs(offs) do
    ops[#ops + 1] = value and "SET" or "GET"
    ops[#ops + 1] = "u1"
    ops[#ops + 1] = off
    if value then ops[#ops + 1] = value end
  end
  return redis.call("BITFIELD", key, unpack(ops))
end

-- The bits at these offsets (0 or 1 each, in order) in one command.
local function bits_get_many(forms, key, offs)
  local form = bits_form(forms, key)
  if #offs > 0 and form == "set" then return redis.call("SMISMEMBER", key, unpack(offs)) end
  if #offs > 0 and form == "string" then return bitfield(key, offs) end
  local zeros = {}
  for i = 1, #offs do zeros[i] = 0 end
  return zeros
end

-- The bits at these offsets go to 0 in one command (past a bitmap's end they
-- already are: BITFIELD SET there would grow the string).
local function bits_clear_many(forms, key, offs)
  local form = bits_form(forms, key)
  if #offs > 0 and form == "set" then
    redis.call("SREM", key, unpack(offs))
  elseif #offs > 0 and form == "string" then
    local limit, inside = 8 * redis.call("STRLEN", key), {}
    for _, off in ipairs(offs) do
      if off < limit then inside[#inside + 1] = off end
    end
    if #inside > 0 then bitfield(key, inside, 0) end
  end
end

-- Sets the bits at these offsets to 1 (what they held is not answered).
local function bits_set_many(forms, key, offs)
  if #offs == 0 then return end
  local top = 0
  for _, off in ipairs(offs) do
    if tonumber(off) > top then top = tonumber(off) end
  end
  if bits_form(forms, key) == "string" then
    -- Growing past its end, the bitmap may be bigger than the set it holds.
    if top < 8 * redis.call("STRLEN", key) or not bits_sparse_again(forms, key, top, #offs) then
      bitfield(key, offs, 1)
      return
    end
  end
  redis.call("SADD", key, unpack(offs))
  forms[key] = "set"
  if bits_dense(key, redis.call("SCARD", key), top) then bits_to_bitmap(forms, key) end
end
