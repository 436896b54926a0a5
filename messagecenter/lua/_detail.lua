-- Shared by the global scripts that write an item's detail (item_put.lua,
-- bulletin_put.lua, pull_register.lua): each passes the keys from its KEYS.
-- Every global key carries the global hash tag (one Redis Cluster slot).
-- A script runs only the preambles whose keys it binds (the static key test
-- reads each script with its preambles).

-- The item detail hash and its version: bumped when a detail is written
-- over, since the read cache holds rendered details and is current only
-- while the version has not moved: detail_key, detail_version_key.

-- An item's detail changed (an edit; not a rewrite of the same JSON) moves
-- the details' version. New items and removals leave it alone (readers
-- merge or settle those anyway).
local function detail_put(detail_key, detail_version_key, ref, json)
  local old = redis.call("HGET", detail_key, ref)
  if old == json then return end
  redis.call("HSET", detail_key, ref, json)
  if old then redis.call("INCR", detail_version_key) end
end
