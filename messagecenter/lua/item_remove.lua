-- Remove an item from every inbox at once: readers settle it on their next
-- read (_removals.lua first). KEYS: 1 item detail hash, 2 pull zset, 3
-- removed zset, 4 removed version. ARGV: 1 ref, 2 inbox member, 3 pull member
-- ("" for push items).

local detail_key, pull_key = KEYS[1], KEYS[2]
local removed_key, removed_version_key = KEYS[3], KEYS[4]
redis.call("HDEL", detail_key, ARGV[1])
if ARGV[3] ~= "" then redis.call("ZREM", pull_key, ARGV[3]) end
mark_removed(removed_key, removed_version_key, ARGV[2])
return 1
