-- Shared by bulletin_put.lua and bulletin_delete.lua, which pass these keys
-- from their KEYS in one table `b`: the bulletin config zset (config_key;
-- members "<id>_<group>", score the display time), the configs' detail hash
-- (bulletin_detail_key), the members of each bulletin (members_key: bulletin
-- id -> its config members), the bulletin update marker (update_key), the
-- change log (changes_key: config member -> marker of its last change) and
-- its floor (changes_floor_key).

-- The marker only grows, even with equal clocks: readers remember the value
-- they took in and merge again only when it moved. The log is complete from
-- the marker it first saw on: a log missing its floor (new, or lost with
-- its keys) starts at the marker before this change. Returns the new marker.
local function bump_update_time(b, now)
  local old = tonumber(redis.call("GET", b.update_key) or "0")
  local value = now
  if value <= old then value = old + 1 end
  redis.call("SET", b.update_key, string.format("%d", value))
  redis.call("SET", b.changes_floor_key, string.format("%d", old), "NX")
  return value
end

-- A dropped config leaves the log too: its removal reaches inboxes through
-- the removed zset, so the log only ever names live configs.
local function drop_bulletin_config(b, bid)
  local old = redis.call("HGET", b.members_key, bid)
  if old then
    for member in string.gmatch(old, "[^,]+") do
      redis.call("ZREM", b.config_key, member)
      redis.call("HDEL", b.bulletin_detail_key, member)
      redis.call("ZREM", b.changes_key, member)
    end
  end
  redis.call("HDEL", b.members_key, bid)
end
