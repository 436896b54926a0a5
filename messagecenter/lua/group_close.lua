-- End the open group whose row is this item (the user read, archived or
-- deleted the row): the next item of its key starts a new group.
-- KEYS: 1 groups hash, 2 open hash, 3 closed hash, 4 the key's members zset,
--   5 the key's ends zset (core.keys.mc_inbox_groups ...; the caller read the
--   row's key from the groups hash first).
-- ARGV: 1 the row's ref, 2 its group key.
-- Returns the time the group ended at (its row's), or false when the item
-- was no open group's row.
local key = ARGV[2]
local head = redis.call("HGET", KEYS[2], key)
if not head or string.match(head, "^[^|]+") ~= ARGV[1] then return false end
local until_time = redis.call("ZSCORE", KEYS[4], head)
if not until_time then return false end
redis.call("HDEL", KEYS[2], key)
redis.call("ZADD", KEYS[5], until_time, until_time .. "|" .. ARGV[1] .. "|")
redis.call("HSET", KEYS[3], until_time .. "|" .. ARGV[1] .. "|" .. key, head)
return until_time
