-- Sets or clears one user's read bit of one announcement in one
-- (platform, chunk), only while the announcement is in the index: a mark
-- racing a delete must not recreate the bitmap the delete just dropped.
-- KEYS[1] meta hash, KEYS[2] index zset, KEYS[3] bitmap.
-- ARGV[1] announcement id, ARGV[2] bit offset, ARGV[3] 1 (read) or 0 (unread).
-- Returns the previous bit, -1 when the chunk was never built (rebuild and
-- retry), -2 when the announcement is not in the index.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return -1
end
if not redis.call('ZSCORE', KEYS[2], ARGV[1]) then
  return -2
end
return redis.call('SETBIT', KEYS[3], ARGV[2], ARGV[3])
