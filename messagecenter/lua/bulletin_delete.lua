-- Delete a bulletin from the read model and from every inbox (_removals.lua
-- and _bulletins.lua first). KEYS: 1 item detail hash, 2 bulletin config
-- zset, 3 bulletin detail hash, 4 bulletin members hash, 5 bulletin update
-- marker, 6 removed zset, 7 removed version, 8 bulletin change log, 9 its
-- floor. ARGV: 1 now (ms), 2 bulletin id, 3 ref, 4 inbox member.

local detail_key = KEYS[1]
config_key, bulletin_detail_key, members_key, update_key = KEYS[2], KEYS[3], KEYS[4], KEYS[5]
removed_key, removed_version_key, changes_key, changes_floor_key = KEYS[6], KEYS[7], KEYS[8], KEYS[9]
drop_bulletin_config(ARGV[2])
redis.call("HDEL", detail_key, ARGV[3])
mark_removed(ARGV[4])
bump_update_time(tonumber(ARGV[1]))
return 1
