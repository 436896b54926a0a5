-- Shared by the global scripts that remove an item from every inbox
-- (bulletin_put.lua, bulletin_delete.lua, item_remove.lua): each passes the
-- removed zset (member -> version) and its version from its KEYS.

-- Users settle removals above their version on their next read.
local function mark_removed(removed_key, removed_version_key, member)
  if member == "" then return end
  local version = redis.call("INCR", removed_version_key)
  redis.call("ZADD", removed_key, version, member)
end
