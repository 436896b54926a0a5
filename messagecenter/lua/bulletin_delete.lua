-- Delete a bulletin from the read model and from every inbox (_removals.lua
-- and _bulletins.lua first). KEYS: 1 item detail hash, 2 bulletin config
-- zset, 3 bulletin detail hash, 4 bulletin members hash, 5 bulletin update
-- marker, 6 removed zset, 7 removed version, 8 bulletin change log, 9 its
-- floor. ARGV: 1 now (ms), 2 bulletin id, 3 ref, 4 inbox member.

local detail_key, removed_key, removed_version_key = KEYS[1], KEYS[6], KEYS[7]
local b = {}  -- the bulletins' keys (_bulletins.lua)
b.config_key, b.bulletin_detail_key, b.members_key, b.update_key = KEYS[2], KEYS[3], KEYS[4], KEYS[5]
b.changes_key, b.changes_floor_key = KEYS[8], KEYS[9]
drop_bulletin_config(b, ARGV[2])
redis.call("HDEL", detail_key, ARGV[3])
mark_removed(removed_key, removed_version_key, ARGV[4])
bump_update_time(b, tonumber(ARGV[1]))
return 1
