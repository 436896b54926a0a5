-- Helpers of the read bitmaps of one (platform, chunk). A read bitmap holds a
-- window of the chunk, from its first byte s: a head, then bit i of the rest
-- is the user at offset 8 * s + i of the chunk. The head is one byte s / 16
-- while s is a multiple of 16 below 4,080 (every window of a chunk of up to
-- 32,640 users), else byte 255 and s in 4 bytes (big-endian). A missing key
-- has no readers. So a bitmap is as long as the span of its readers' offsets
-- (plus at most 15 bytes), never as long as an offset: one reader far into a
-- chunk costs a few bytes, not the chunk's 4 KiB.

local function notice_u32(n)
  return string.char(math.floor(n / 16777216) % 256, math.floor(n / 65536) % 256, math.floor(n / 256) % 256, n % 256)
end

-- Makes the string KEYS[at] (missing: empty) at least len bytes long, at
-- exactly that length: SETBIT and BITFIELD grow a string greedily (to about
-- twice what it needs), and a read bitmap or counter block would keep that
-- slack for good. One copy of at most a chunk's bytes, only when it grows.
local function notice_fit(at, len)
  local have = redis.call('STRLEN', KEYS[at])
  if have < len then
    local data = have > 0 and redis.call('GET', KEYS[at]) or ''
    redis.call('SET', KEYS[at], data .. string.rep('\0', len - have))
  end
end

-- (first byte s, head length) of the read bitmap in string data (at least
-- its first 5 bytes), nil when empty.
local function notice_window_of(data)
  if not data or #data == 0 then
    return nil
  end
  local b0 = string.byte(data, 1)
  if b0 < 255 then
    return b0 * 16, 1
  end
  local b1, b2, b3, b4 = string.byte(data, 2, 5)
  return ((b1 * 256 + b2) * 256 + b3) * 256 + b4, 5
end

-- The head of a window starting at or before byte b: (head, first byte).
local function notice_head_for(b)
  local s = b - b % 16
  if s < 255 * 16 then
    return string.char(s / 16), s
  end
  return string.char(255) .. notice_u32(b), b
end

-- (first byte, head length) of the read bitmap KEYS[at], nil when missing.
local function notice_window(at)
  return notice_window_of(redis.call('GETRANGE', KEYS[at], 0, 4))
end

-- The bit (0 or 1) of the user at offset of the read bitmap KEYS[at].
local function notice_bit_get(at, offset)
  local first, head = notice_window(at)
  local pos = first and tonumber(offset) - first * 8 or -1
  if pos < 0 then
    return 0
  end
  return redis.call('GETBIT', KEYS[at], head * 8 + pos) -- past the end: 0
end

-- Sets the bit of the user at offset to value (0 or 1); returns the previous
-- bit. A user before the window moves its start there (one rewrite of at most
-- a chunk's bytes); clearing a bit outside the window changes nothing.
local function notice_bit_set(at, offset, value)
  offset, value = tonumber(offset), tonumber(value)
  local byte = math.floor(offset / 8)
  local first, head = notice_window(at)
  if not first or byte < first then
    if value == 0 then
      return 0
    end
    local new_head, start = notice_head_for(byte)
    local rest = ''
    if first then
      rest = string.rep('\0', first - start) .. string.sub(redis.call('GET', KEYS[at]), head + 1)
    end
    redis.call('SET', KEYS[at], new_head .. rest)
    first, head = start, #new_head
  end
  if value == 1 then
    notice_fit(at, head + byte - first + 1)
  elseif head + byte - first >= redis.call('STRLEN', KEYS[at]) then
    return 0 -- past the window: unread already (SETBIT would grow the string)
  end
  return redis.call('SETBIT', KEYS[at], head * 8 + offset - first * 8, value)
end
