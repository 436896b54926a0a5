-- End the open group whose row is this item (the user read, archived or
-- deleted the row): the next item of its key starts a new group.
-- KEYS: 1 groups hash, 2 open hash (core.keys.mc_inbox_groups, _groups_open).
-- ARGV: 1 the row's ref.
-- Returns the group key it closed, or false when the item was no open group's row.
local raw = redis.call("HGET", KEYS[1], ARGV[1])
if not raw then return false end
local key = cjson.decode(raw).key
local head = redis.call("HGET", KEYS[2], key)
if head and string.match(head, "^[^|]+") == ARGV[1] then
  redis.call("HDEL", KEYS[2], key)
  return key
end
return false
