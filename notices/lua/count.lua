-- One user's read count over the live announcements of one (platform, chunk),
-- kept as a small per-user cache so a count is not a walk over every bitmap.
--
-- KEYS[1] meta hash, KEYS[2] the chunk's reads epoch (moved when bitmaps are
-- restored from snapshots), KEYS[3] the user's cached count, then (only on
-- the second call, after -2) the bitmaps of the announcements the caller
-- found live at this moment in its copy of the index.
-- ARGV[1] token that copy was read under, ARGV[2] bit offset (user id within
-- the chunk), ARGV[3] a digest of which announcements of that copy are live
-- now (time moves the live set), ARGV[4] the cache's lifetime (s).
--
-- The cache holds "<token>:<epoch>:<digest>|<read>": the user's marks delete
-- it (mark.lua), a rebuilt index changes the token, a restore the epoch, and
-- a publish time or expiry passing the digest.
-- Returns -1 when the token moved (refresh the copy), -2 when nothing current
-- is cached (call again with the bitmaps), else the read count.
local token = redis.call("HGET", KEYS[1], "token")
if token ~= ARGV[1] then
  return -1
end
local tag = token .. ":" .. (redis.call("GET", KEYS[2]) or "0") .. ":" .. ARGV[3]
if #KEYS == 3 then
  local held = redis.call("GET", KEYS[3])
  if held then
    local held_tag, read = string.match(held, "^([^|]*)|(%d+)$")
    if held_tag == tag then
      return tonumber(read)
    end
  end
  return -2
end
local read = 0
for i = 4, #KEYS do
  read = read + redis.call("GETBIT", KEYS[i], ARGV[2])
end
redis.call("SET", KEYS[3], tag .. "|" .. read, "EX", ARGV[4])
return read
