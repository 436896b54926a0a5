-- Read state of one user over one (platform, chunk): the live announcements
-- and whether this user read each, in one round trip.
--
-- KEYS[1] meta hash, KEYS[2] index zset (score = publish ms),
-- KEYS[3] expiry zset (score = expire ms), KEYS[3+i] bitmap of ARGV[3+i].
-- ARGV[1] token the caller's id list was read under, ARGV[2] bit offset
-- (user id within the chunk), ARGV[3] now (ms), ARGV[3+i] announcement id.
--
-- The script cannot build bitmap key names (Redis Cluster), so the caller
-- passes the bitmaps of the ids it believes the index holds; the token proves
-- it: any rebuild changes it, and then {-1} tells the caller to refresh.
-- Returns {1, id, publish_ms, bit, id, publish_ms, bit, ...} for live ids.
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then
  return {-1}
end
local position = {}
for i = 4, #ARGV do
  position[ARGV[i]] = i
end
local now = tonumber(ARGV[3])
local published = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[3], 'WITHSCORES')
local out = {1}
for i = 1, #published, 2 do
  local id = published[i]
  local expire = redis.call('ZSCORE', KEYS[3], id)
  if (not expire) or tonumber(expire) > now then
    local key = position[id]
    if not key then
      return {-1}
    end
    out[#out + 1] = id
    out[#out + 1] = published[i + 1]
    out[#out + 1] = redis.call('GETBIT', KEYS[key], ARGV[2])
  end
end
return out
