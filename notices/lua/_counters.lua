-- Helpers of the per-user read counters of one (platform, chunk). A user's
-- counter is how many announcements of the chunk index that were live at the
-- chunk time (meta field ``t``) the user has read. Reads add what changed
-- between that time and now (count.lua); advance.lua moves the time on for
-- every reader.
--
-- A counter block holds NOTICE_BLOCK_USERS users: byte 0 is the width w of its
-- counters in bits (4, 8, 16 or 32), counter i is the unsigned BITFIELD at bit
-- 8 + i * w. A missing block is all zeros. A block is only as long as its
-- highest non-zero counter needs (BITFIELD grows it), and only as wide as its
-- largest counter needs: a counter that would pass 2^w - 1 widens the whole
-- block once (a rewrite of at most NOTICE_BLOCK_USERS counters), so counts
-- stay exact while most blocks (users who read fewer than 16 live
-- announcements) cost half a byte per user.

local NOTICE_WIDEST = 32

-- Whether an announcement is live at t: publish <= t < expire (nil or false:
-- not in the index / never expires).
local function notice_live(publish, expire, t)
  return (publish and publish <= t and (not expire or t < expire)) and true or false
end

-- (publish, expire) of id in the index and expiry zsets (KEYS[index_at],
-- KEYS[expiry_at]), numbers or nil.
local function notice_times(index_at, expiry_at, id)
  local publish = redis.call('ZSCORE', KEYS[index_at], id)
  local expire = redis.call('ZSCORE', KEYS[expiry_at], id)
  return publish and tonumber(publish) or nil, expire and tonumber(expire) or nil
end

-- The counter width of block KEYS[at], nil when the block is missing.
local function notice_block_width(at)
  local head = redis.call('GETRANGE', KEYS[at], 0, 0)
  if head == '' then
    return nil
  end
  return string.byte(head)
end

-- Counter i (from 0) of block KEYS[at]; 0 past the block's end or when missing.
local function notice_counter_get(at, i)
  local w = notice_block_width(at)
  if not w then
    return 0
  end
  return redis.call('BITFIELD', KEYS[at], 'GET', 'u' .. w, 8 + i * w)[1]
end

-- Rewrites block KEYS[at] from width w to 2w (every counter keeps its value):
-- big-endian unsigned, so a wider counter is its bytes after as many zero
-- bytes; 4-bit counters are two per byte.
local function notice_block_widen(at, w)
  local data = redis.call('GET', KEYS[at])
  local out = { string.char(w * 2) }
  if w == 4 then
    for i = 2, #data do
      local byte = string.byte(data, i)
      out[#out + 1] = string.char(math.floor(byte / 16), byte % 16)
    end
  else
    local size = w / 8
    local pad = string.rep('\0', size)
    -- A block's length is whole counters (BITFIELD grew it by whole bytes, and
    -- a w >= 8 counter is whole bytes).
    for i = 2, #data, size do
      out[#out + 1] = pad .. string.sub(data, i, i + size - 1)
    end
  end
  redis.call('SET', KEYS[at], table.concat(out))
  return w * 2
end

-- Runs BITFIELD on KEYS[at] with OVERFLOW overflow and one INCRBY u<w> per
-- (i, delta) of ops = {i1, d1, ...}, in batches; returns the replies in order.
local function notice_incr(at, w, overflow, ops)
  local replies = {}
  for j = 1, #ops, 2000 do
    local args = { 'OVERFLOW', overflow }
    for k = j, math.min(j + 1999, #ops), 2 do
      args[#args + 1] = 'INCRBY'
      args[#args + 1] = 'u' .. w
      args[#args + 1] = 8 + ops[k] * w
      args[#args + 1] = ops[k + 1]
    end
    for _, reply in ipairs(redis.call('BITFIELD', KEYS[at], unpack(args))) do
      replies[#replies + 1] = reply
    end
  end
  return replies
end

-- Adds deltas to counters of block KEYS[at]: ops = {i1, d1, i2, d2, ...}
-- (each counter at most once). A counter that would overflow its width
-- widens the block and is added again; one that would go below 0 (never,
-- while counters match their bitmaps) stays at 0, as before. The block grows
-- exactly to its highest counter (notice_fit), never by a decrement.
local function notice_counters_add(at, ops)
  local ups, downs = {}, {}
  for j = 1, #ops, 2 do
    local list = ops[j + 1] > 0 and ups or downs
    list[#list + 1] = ops[j]
    list[#list + 1] = ops[j + 1]
  end
  local w = notice_block_width(at)
  if w and #downs > 0 then
    -- A counter past the block's end is 0, and stays 0 (SAT).
    local bits = redis.call('STRLEN', KEYS[at]) * 8
    local inside = {}
    for j = 1, #downs, 2 do
      if 8 + (downs[j] + 1) * w <= bits then
        inside[#inside + 1] = downs[j]
        inside[#inside + 1] = downs[j + 1]
      end
    end
    notice_incr(at, w, 'SAT', inside)
  end
  if #ups == 0 then
    return
  end
  if not w then
    redis.call('SET', KEYS[at], string.char(4))
    w = 4
  end
  while #ups > 0 do
    local top = 0
    for j = 1, #ups, 2 do
      top = math.max(top, ups[j])
    end
    notice_fit(at, 1 + math.ceil((top + 1) * w / 8))
    local replies = notice_incr(at, w, w >= NOTICE_WIDEST and 'SAT' or 'FAIL', ups)
    local again = {}
    for j = 1, #ups, 2 do
      if not replies[(j + 1) / 2] then
        again[#again + 1] = ups[j]
        again[#again + 1] = ups[j + 1]
      end
    end
    if #again > 0 then
      w = notice_block_widen(at, w)
    end
    ups = again
  end
end

