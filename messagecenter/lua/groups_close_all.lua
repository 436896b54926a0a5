-- End every open group (of one category): "read all" read their rows.
-- KEYS: 1 open hash (core.keys.mc_inbox_groups_open).
-- ARGV: 1 the category ("" = all).
-- The open hash holds one field per unread grouped row, so the walk is as
-- long as the rows "read all" marks anyway.
-- Returns how many groups it closed.
if ARGV[1] == "" then
  local n = redis.call("HLEN", KEYS[1])
  redis.call("DEL", KEYS[1])
  return n
end
local flat = redis.call("HGETALL", KEYS[1])
local closed = 0
for i = 1, #flat, 2 do
  local category = string.match(flat[i + 1], "^[^|]+|([^|]+)")
  if category == ARGV[1] then
    redis.call("HDEL", KEYS[1], flat[i])
    closed = closed + 1
  end
end
return closed
