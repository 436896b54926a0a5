-- Store a pull item once; users merge it on their next read (_detail.lua
-- first). KEYS: 1 item detail hash, 2 item detail version, 3 pull zset,
-- 4 pull sequence. ARGV: 1 ref, 2 item JSON, 3 pull member, 4 the live
-- broadcast channel ("" = none), 5 its event: published here when the item
-- is registered, so open pages hear of it without another round trip.
-- Registering twice is a no-op (0, and nobody is told again); else the
-- item's sequence number.

local detail_key, detail_version_key = KEYS[1], KEYS[2]
local pull_key, sequence_key = KEYS[3], KEYS[4]
detail_put(detail_key, detail_version_key, ARGV[1], ARGV[2])
if redis.call("ZSCORE", pull_key, ARGV[3]) then return 0 end
local seq = redis.call("INCR", sequence_key)
redis.call("ZADD", pull_key, seq, ARGV[3])
if ARGV[4] ~= "" then redis.call("PUBLISH", ARGV[4], ARGV[5]) end
return seq
