-- Sets or clears one user's read bit of one announcement in one
-- (platform, chunk), only while the announcement is in the index: a mark
-- racing a delete must not recreate the bitmap the delete just dropped.
-- KEYS[1] meta hash, KEYS[2] index zset, KEYS[3] bitmap, KEYS[4] per-hour read
-- counter hash, KEYS[5] the user's cached read count (count.lua), dropped
-- when the bit changes.
-- ARGV[1] announcement id, ARGV[2] bit offset, ARGV[3] 1 (read) or 0 (unread),
-- ARGV[4] the current hour (ms // 3600000), ARGV[5] the counter's lifetime (s).
-- Returns the previous bit, -1 when the chunk was never built (rebuild and
-- retry), -2 when the announcement is not in the index.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return -1
end
if not redis.call('ZSCORE', KEYS[2], ARGV[1]) then
  return -2
end
local previous = redis.call('SETBIT', KEYS[3], ARGV[2], ARGV[3])
if KEYS[5] and previous ~= tonumber(ARGV[3]) then
  redis.call('DEL', KEYS[5])
end
-- Count first reads per hour for the read-rate chart; in the same script so
-- a count never exists without its bit (or the other way round).
if KEYS[4] and previous == 0 and ARGV[3] == '1' then
  redis.call('HINCRBY', KEYS[4], ARGV[4], 1)
  redis.call('EXPIRE', KEYS[4], ARGV[5])
end
return previous
