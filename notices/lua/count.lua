-- One user's read count over the announcements of one (platform, chunk) live
-- now: the user's maintained counter (live at the chunk time t) plus, for the
-- few announcements whose publish or expiry time lies between t and now,
-- the change their bit makes. No walk over the index or the bitmaps.
--
-- KEYS[1] meta hash, KEYS[2] index zset, KEYS[3] expiry zset, KEYS[4] the
-- user's counter block, then (second call only) the bitmaps of the
-- announcements whose liveness differs between t and now.
-- ARGV[1] token of the caller's index copy, ARGV[2] the user's counter (index in its block),
-- ARGV[3] now (ms), ARGV[4] bit offset, ARGV[5] the chunk time the caller
-- read ('' on the first call), ARGV[6..] per bitmap: live now minus live at t
-- (1 or -1), worked out from the caller's copy (the token proves it current).
--
-- Returns the read count; -1 when the token moved (refresh the copy); -2 when
-- publish or expiry times lie between t and now (read t, call again with
-- those bitmaps); -3 when the chunk has no time (built before counters
-- existed: rebuild it).
local meta = redis.call('HMGET', KEYS[1], 'token', 't')
if meta[1] ~= ARGV[1] then
  return -1
end
local t = meta[2]
if not t then
  return -3
end
local read = notice_counter_get(4, tonumber(ARGV[2]))
local now = ARGV[3]
if tonumber(now) == tonumber(t) then
  return read
end
if ARGV[5] ~= t then
  local low, high = t, now
  if tonumber(now) < tonumber(t) then
    low, high = now, t
  end
  local after = '(' .. low -- exclusive: a time equal to low changed nothing since low
  if redis.call('ZCOUNT', KEYS[2], after, high) > 0 or redis.call('ZCOUNT', KEYS[3], after, high) > 0 then
    return -2
  end
  return read
end
for i = 5, #KEYS do
  read = read + tonumber(ARGV[i + 1]) * notice_bit_get(i, ARGV[4])
end
return read
