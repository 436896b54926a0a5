-- Moves one (platform, chunk)'s time t on to ARGV[3]: every reader of an
-- announcement whose liveness changed in between gets its counter moved
-- (once per chunk and change, not once per user and read).
-- KEYS[1] meta hash, KEYS[2 .. 1 + nb] the chunk's counter blocks, then the
-- bitmaps of the announcements whose liveness differs between t and the new time.
-- ARGV[1] token of the caller's index copy, ARGV[2] the t it read, ARGV[3] the
-- new time, ARGV[4] nb, ARGV[5] users per block, ARGV[6..] per bitmap: live
-- at the new time minus live at t (1 or -1).
-- Returns 1, or 0 (changing nothing) when the token or t moved meanwhile.
local meta = redis.call('HMGET', KEYS[1], 'token', 't')
if meta[1] ~= ARGV[1] or meta[2] ~= ARGV[2] then
  return 0
end
local nb = tonumber(ARGV[4])
for i = 2 + nb, #KEYS do
  notice_add_readers(i, 2, nb, tonumber(ARGV[5]), tonumber(ARGV[6 + i - 2 - nb]))
end
redis.call('HSET', KEYS[1], 't', ARGV[3])
return 1
