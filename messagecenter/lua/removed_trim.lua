-- Keep the newest removals. Users whose settled version is below the new
-- floor re-check their whole inbox against the details on their next read.
-- KEYS: 1 removed zset, 2 removed floor. ARGV: 1 entries to keep.
-- Returns how many were dropped.

local removed_key, floor_key = KEYS[1], KEYS[2]
local keep = tonumber(ARGV[1])
local removed_count = redis.call("ZCARD", removed_key)
if removed_count <= keep then return 0 end
local last = redis.call("ZRANGE", removed_key, removed_count - keep - 1, removed_count - keep - 1, "WITHSCORES")
redis.call("ZREMRANGEBYRANK", removed_key, 0, removed_count - keep - 1)
redis.call("SET", floor_key, last[2])
return removed_count - keep
