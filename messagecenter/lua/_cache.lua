-- Shared by page.lua and counts.lua (after the inbox preambles), which
-- name its keys.
--
-- Read cache (fast path): the user's page-cache hash keeps rendered first
-- pages and the counts, each under a field with "<tag>|<valid until>" under
-- the field plus "#". readmodel/readcache.py defines the tag (its values'
-- names and order, the separators: CACHE_TAG, CACHE_JOIN and CACHE_UNTIL,
-- prepended to these scripts) and checks it without a script on a poll.
-- Here each name's value is one the script read: the user's rev, the live
-- version, how many of the user's writes are in flight, and what level()
-- compared. Valid until: the earliest expiry in the inbox, the next
-- bulletin display time or the end of the grace of a write in flight,
-- whichever comes first (time moves them then, no write does). While the
-- tag is unchanged and that time has not come, a stored value is what a
-- computation now would give. The script binds the cache's keys:
-- ib.pages_key, ib.live_version_key.

local function cache_tag(ib)
  local values = {live = call("GET", ib.live_version_key) or "0"}
  if ib.touched then values.rev = call("HGET", ib.state_key, "rev") or "0" end
  -- Read by open_inbox on a checked call. Otherwise nothing is noted (healing
  -- is off) or the call is not a user's: "0" then at worst misses a poll.
  values.writing = ib.writing or "0"
  local parts = {}
  for i, name in ipairs(CACHE_TAG) do parts[i] = values[name] or ib.levels[name] end
  return table.concat(parts, CACHE_JOIN)
end

local function cache_until(ib)
  local until_ = ib.next_expiry
  -- A snoozed item's wake changes the page and the counts as an expiry does.
  if ib.next_wake ~= "" and (until_ == "" or tonumber(ib.next_wake) < tonumber(until_)) then until_ = ib.next_wake end
  local after_now = "(" .. ib.now_arg
  local shows = call("ZRANGEBYSCORE", ib.bulletin_config_key, after_now, "+inf", "WITHSCORES", "LIMIT", 0, 1)
  if #shows == 2 and (until_ == "" or tonumber(shows[2]) < tonumber(until_)) then until_ = shows[2] end
  -- A write in flight past its grace makes the next checked call fill the user.
  if ib.write_due and (until_ == "" or ib.write_due < tonumber(until_)) then until_ = tostring(ib.write_due) end
  return until_
end

-- The value held under field if its tag is current, else nil.
local function cache_held(ib, field, tag)
  local held = call("HMGET", ib.pages_key, field .. "#", field)
  if held[1] and held[2] then
    local cut = string.find(held[1], CACHE_UNTIL, 1, true)
    if not cut then return nil end
    local held_tag, until_ = string.sub(held[1], 1, cut - 1), string.sub(held[1], cut + 1)
    if held_tag == tag and (until_ == "" or ib.now < tonumber(until_)) then return held[2] end
  end
  return nil
end
