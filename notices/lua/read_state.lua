-- Read bits of one user over the live announcements of one (platform, chunk),
-- in one round trip.
--
-- KEYS[1] meta hash, KEYS[2..] the bitmaps of the announcements the caller
-- found live at this moment in its copy of the index.
-- ARGV[1] token that copy was read under, ARGV[2] bit offset (user id within
-- the chunk).
--
-- The script cannot build bitmap key names (Redis Cluster), so the caller
-- passes them; the token proves its copy (ids, publish and expiry times) is
-- current: any rebuild changes it, and then -1 tells the caller to refresh.
-- Returns a string with one character per bitmap key: '1' read, '0' unread.
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then
  return -1
end
local bits = {}
for i = 2, #KEYS do
  bits[i - 1] = notice_bit_get(i, ARGV[2])
end
return table.concat(bits)
