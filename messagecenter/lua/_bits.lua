-- A user's per-month bit-sets (push, read, ever-read: bit = an item's offset
-- in its month, which is dense over every item of the month, not the user's).
-- Each key is in one of two forms, and every bit read or write of the inbox
-- scripts goes through the helpers below:
--   SET of offsets  while sparse: an intset costs ~4 B per offset whatever
--                   the offsets are, so a user with 5 items in a month of a
--                   million costs bytes, not the 122 KiB of a bitmap;
--   bitmap (string) once dense: when the bitmap is no bigger than the set
--                   would be (4 B per offset against max offset / 8), or the
--                   set would pass BITS_SET_MAX (intsets stop there), it is
--                   converted (at most BITS_SET_MAX SETBITs). A small bitmap
--                   that a far offset would make bigger than the set goes
--                   back to a set (bits_sparse_again).
-- A missing key reads as all zeros in both forms. The form is asked once per
-- key per call (TYPE) and kept in the call's `forms` table (key -> "set" |
-- "string" | "none"), which every helper takes first: an inbox script passes
-- its inbox's (ib.forms), any other script a table of its own.

local BITS_SET_MAX = 512  -- Redis's default set-max-intset-entries

local function bits_form(forms, key)
  local form = forms[key]
  if not form then
    form = redis.call("TYPE", key)["ok"]
    forms[key] = form
  end
  return form
end

local function bits_get(forms, key, off)
  local form = bits_form(forms, key)
  if form == "set" then return redis.call("SISMEMBER", key, off) end
  if form == "string" then return redis.call("GETBIT", key, off) end
  return 0
end

-- The set becomes a bitmap holding the same offsets (the set holds at most
-- BITS_SET_MAX of them).
local function bits_to_bitmap(forms, key)
  if bits_form(forms, key) == "set" then
    local offsets = redis.call("SMEMBERS", key)
    redis.call("DEL", key)
    for _, o in ipairs(offsets) do redis.call("SETBIT", key, o, 1) end
  end
  forms[key] = "string"
end

-- Is a set of `count` offsets, `off` among them, at least as big as their
-- bitmap would be? The bitmap spans up to the highest offset; the members
-- are read only when `off` alone does not already make the bitmap bigger.
local function bits_dense(key, count, off)
  if count > BITS_SET_MAX then return true end
  local bytes = 4 * count
  if bytes < math.floor(off / 8) + 1 then return false end
  local top = tonumber(off)
  for _, o in ipairs(redis.call("SMEMBERS", key)) do
    if tonumber(o) > top then top = tonumber(o) end
  end
  return bytes >= math.floor(top / 8) + 1
end

-- A bitmap about to grow to hold `off` (and `adding` bits in all, 1 when
-- nil) goes back to a set when the set would be the smaller (a month dense
-- at first, sparse later: the first items of a month have low offsets for
-- everyone). Bounded: only a bitmap of at most 4 * BITS_SET_MAX bytes is
-- looked at (a bigger one was dense when it grew).
local function bits_sparse_again(forms, key, off, adding)
  local len = redis.call("STRLEN", key)
  if len > 4 * BITS_SET_MAX then return false end
  local count = redis.call("BITCOUNT", key) + (adding or 1)
  if count > BITS_SET_MAX or 4 * count >= math.floor(off / 8) + 1 then return false end
  local data, offsets = redis.call("GET", key), {}
  for i = 1, #data do
    local byte = string.byte(data, i)
    for b = 0, 7 do  -- bit 0 is the byte's highest, as Redis numbers them
      local weight = 2 ^ (7 - b)
      if byte >= weight then
        offsets[#offsets + 1] = (i - 1) * 8 + b
        byte = byte - weight
      end
    end
  end
  redis.call("DEL", key)
  if #offsets > 0 then redis.call("SADD", key, unpack(offsets)) end
  forms[key] = "set"
  return true
end

-- SETBIT in either form: returns the bit's old value (0 or 1).
local function bits_set(forms, key, off, want)
  local form = bits_form(forms, key)
  if form == "string" then
    -- Past the bitmap's end: a 0 is already there; a 1 may make a set smaller.
    if tonumber(off) < 8 * redis.call("STRLEN", key) then return redis.call("SETBIT", key, off, want) end
    if tonumber(want) == 0 then return 0 end
    if not bits_sparse_again(forms, key, off) then return redis.call("SETBIT", key, off, 1) end
    form = "set"
  end
  if tonumber(want) == 0 then
    -- An emptied set is deleted by Redis: it reads as zeros, as before.
    if form == "set" then return redis.call("SREM", key, off) end
    return 0
  end
  if redis.call("SADD", key, off) == 0 then return 1 end
  forms[key] = "set"
  if bits_dense(key, redis.call("SCARD", key), off) then bits_to_bitmap(forms, key) end
  return 0
end

-- The offsets set in `key`'s set form (nil when it is a bitmap).
local function bits_members(forms, key)
  local form = bits_form(forms, key)
  if form == "string" then return nil end
  if form == "set" then return redis.call("SMEMBERS", key) end
  return {}
end

-- dst |= src, keeping the compact form: a set source is added offset by
-- offset (at most BITS_SET_MAX), a bitmap source turns dst into a bitmap.
local function bits_or(forms, dst, src)
  local offsets = bits_members(forms, src)
  if offsets then
    for _, o in ipairs(offsets) do bits_set(forms, dst, o, 1) end
    return
  end
  bits_to_bitmap(forms, dst)
  redis.call("BITOP", "OR", dst, dst, src)
end
