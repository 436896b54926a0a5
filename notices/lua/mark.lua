-- Sets or clears one user's read bit of one announcement in one
-- (platform, chunk), only while the announcement is in the index: a mark
-- racing a delete must not recreate the bitmap the delete just dropped.
-- The user's read counter moves with the bit when the announcement was live
-- at the chunk time (what the counter counts, see _counters.lua).
-- KEYS[1] meta hash, KEYS[2] index zset, KEYS[3] expiry zset, KEYS[4] bitmap,
-- KEYS[5] per-hour read counter hash, KEYS[6] the user's counter block.
-- ARGV[1] announcement id, ARGV[2] bit offset, ARGV[3] 1 (read) or 0 (unread),
-- ARGV[4] the current hour (ms // 3600000), ARGV[5] the hour counter's
-- lifetime (s), ARGV[6] the user's counter in the block (index from 0).
-- Returns the previous bit, -1 when the chunk was never built (rebuild and
-- retry), -2 when the announcement is not in the index.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return -1
end
local publish, expire = notice_times(2, 3, ARGV[1])
if publish == nil then
  return -2
end
local previous = notice_bit_set(4, ARGV[2], ARGV[3])
if previous ~= tonumber(ARGV[3]) then
  local t = tonumber(redis.call('HGET', KEYS[1], 't'))
  if t ~= nil and notice_live(publish, expire, t) then
    notice_counters_add(6, { tonumber(ARGV[6]), previous == 0 and 1 or -1 })
  end
end
-- Count first reads per hour for the read-rate chart; in the same script so
-- a count never exists without its bit (or the other way round).
if previous == 0 and ARGV[3] == '1' then
  redis.call('HINCRBY', KEYS[5], ARGV[4], 1)
  redis.call('EXPIRE', KEYS[5], ARGV[5])
end
return previous
