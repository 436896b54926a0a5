-- Shared by bulletin_put.lua and bulletin_delete.lua, which bind these keys
-- from their KEYS: the bulletin config zset (members "<id>_<group>", score
-- the display time), the configs' detail hash, the members of each bulletin
-- (bulletin id -> its config members), the bulletin update marker, the
-- change log (config member -> marker of its last change) and its floor.
local config_key, bulletin_detail_key, members_key, update_key = nil, nil, nil, nil
local changes_key, changes_floor_key = nil, nil

-- The marker only grows, even with equal clocks: readers remember the value
-- they took in and merge again only when it moved. The log is complete from
-- the marker it first saw on: a log missing its floor (new, or lost with
-- its keys) starts at the marker before this change. Returns the new marker.
local function bump_update_time(now)
  local old = tonumber(redis.call("GET", update_key) or "0")
  local value = now
  if value <= old then value = old + 1 end
  redis.call("SET", update_key, string.format("%d", value))
  redis.call("SET", changes_floor_key, string.format("%d", old), "NX")
  return value
end

-- A dropped config leaves the log too: its removal reaches inboxes through
-- the removed zset, so the log only ever names live configs.
local function drop_bulletin_config(bid)
  local old = redis.call("HGET", members_key, bid)
  if old then
    for member in string.gmatch(old, "[^,]+") do
      redis.call("ZREM", config_key, member)
      redis.call("HDEL", bulletin_detail_key, member)
      redis.call("ZREM", changes_key, member)
    end
  end
  redis.call("HDEL", members_key, bid)
end
