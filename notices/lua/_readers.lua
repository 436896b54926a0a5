-- The counters' pass over a read bitmap (helpers of _counters.lua, which comes
-- first): every reader of one announcement gains or loses it at once.

-- Adds delta to the counter of every user whose bit is set in the bitmap
-- KEYS[bitmap_at] (a window, see _bits.lua); the chunk's nb counter blocks
-- (size users each) are KEYS[first_block_at ..] in order. Work is bounded by
-- the bitmap (at most chunk-size bits): one pass over its bytes, one BITFIELD
-- per block and 1,000 set bits.
local function notice_add_readers(bitmap_at, first_block_at, nb, size, delta)
  local data = redis.call('GET', KEYS[bitmap_at])
  local first, head = notice_window_of(data)
  if not first then
    return 0
  end
  local ops = {}
  local n = 0
  for i = head + 1, #data do
    local byte = string.byte(data, i)
    if byte ~= 0 then
      for b = 0, 7 do
        -- Bit b of the byte, counted from the most significant (Redis's order).
        if math.floor(byte / 2 ^ (7 - b)) % 2 == 1 then
          local offset = (first + i - head - 1) * 8 + b
          local block = math.floor(offset / size) + 1
          if block <= nb then
            local list = ops[block]
            if not list then
              list = {}
              ops[block] = list
            end
            list[#list + 1] = offset % size
            list[#list + 1] = delta
            n = n + 1
          end
        end
      end
    end
  end
  for block, list in pairs(ops) do
    notice_counters_add(first_block_at + block - 1, list)
  end
  return n
end
