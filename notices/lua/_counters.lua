-- Helpers of the per-user read counters of one (platform, chunk). A user's
-- counter (u16 in a BITFIELD "block" string of NOTICE_BLOCK_USERS users) is
-- how many announcements of the chunk index that were live at the chunk time
-- (meta field ``t``) the user has read. Reads add what changed between that
-- time and now (count.lua); advance.lua moves the time on for every reader.

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

-- Creates the counter block KEYS[at] at its full size (size u16 counters)
-- when missing: written once at its final length, a block never pays the
-- string's doubling growth.
local function notice_block_ready(at, size)
  if redis.call('EXISTS', KEYS[at]) == 0 then
    redis.call('SETRANGE', KEYS[at], size * 2 - 1, '\0')
  end
end

-- Adds delta to the counter of every user whose bit is set in the bitmap
-- KEYS[bitmap_at]; the chunk's nb counter blocks (size users each) are
-- KEYS[first_block_at ..] in order. Work is bounded by
-- the bitmap (at most chunk-size bits): one pass over its bytes, one BITFIELD
-- per block and 1,000 set bits. SAT: a counter never wraps below 0 or above 65535.
local function notice_add_readers(bitmap_at, first_block_at, nb, size, delta)
  local data = redis.call('GET', KEYS[bitmap_at])
  if not data then
    return 0
  end
  local ops = {}
  local n = 0
  for i = 1, #data do
    local byte = string.byte(data, i)
    if byte ~= 0 then
      for b = 0, 7 do
        -- Bit b of the byte, counted from the most significant (Redis's order).
        if math.floor(byte / 2 ^ (7 - b)) % 2 == 1 then
          local offset = (i - 1) * 8 + b
          local block = math.floor(offset / size) + 1
          if block <= nb then
            local list = ops[block]
            if not list then
              list = {}
              ops[block] = list
            end
            list[#list + 1] = 'INCRBY'
            list[#list + 1] = 'u16'
            list[#list + 1] = '#' .. (offset % size)
            list[#list + 1] = delta
            n = n + 1
          end
        end
      end
    end
  end
  for block, list in pairs(ops) do
    notice_block_ready(first_block_at + block - 1, size)
    for j = 1, #list, 4000 do
      redis.call('BITFIELD', KEYS[first_block_at + block - 1], 'OVERFLOW', 'SAT', unpack(list, j, math.min(j + 3999, #list)))
    end
  end
  return n
end
