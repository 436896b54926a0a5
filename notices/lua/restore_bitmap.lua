-- Writes one restored read bitmap (a snapshot from PostgreSQL) only where
-- Redis has none, so a restore while the site serves never undoes a newer
-- mark; when the announcement counts in the chunk's read counters (in the
-- index and live at the chunk time t), its readers' counters move with it.
-- KEYS[1] meta hash, KEYS[2] index zset, KEYS[3] expiry zset, KEYS[4] the
-- bitmap, KEYS[5..] the chunk's counter blocks.
-- ARGV[1] the bitmap, ARGV[2] announcement id, ARGV[3] users per block.
-- Returns 1 when written, 0 when a bitmap was there.
if not redis.call('SET', KEYS[4], ARGV[1], 'NX') then
  return 0
end
local t = tonumber(redis.call('HGET', KEYS[1], 't'))
if t ~= nil then
  local publish, expire = notice_times(2, 3, ARGV[2])
  if notice_live(publish, expire, t) then
    notice_add_readers(4, 5, #KEYS - 4, tonumber(ARGV[3]), 1)
  end
end
return 1
