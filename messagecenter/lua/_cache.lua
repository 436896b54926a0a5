-- Shared by page.lua and counts.lua (after the inbox preambles), which
-- name its keys.
--
-- Read cache (fast path): the user's page-cache hash keeps rendered first
-- pages and the counts, each under a field with "<tag>|<valid until>" under
-- the field plus "#". readmodel/readcache.py defines the tag (its values'
-- names and order, the separators: CACHE_TAG, CACHE_JOIN and CACHE_UNTIL,
-- prepended to these scripts) and checks it without a script on a poll.
-- Here each name's value is one the script read: the user's rev, the live
-- version, and what level() compared. Valid until: the earliest expiry in
-- the inbox or the next bulletin display time, whichever comes first (time
-- moves them then, no write does). While the tag is unchanged and that time
-- has not come, a stored value is what a computation now would give.
local pages_key, live_version_key = nil, nil

local function cache_tag()
  local values = {live = call("GET", live_version_key) or "0"}
  if TOUCHED then values.rev = call("HGET", state_key, "rev") or "0" end
  local parts = {}
  for i, name in ipairs(CACHE_TAG) do parts[i] = values[name] or LEVEL[name] end
  return table.concat(parts, CACHE_JOIN)
end

local function cache_until()
  local until_ = NEXT_EXPIRY
  -- A snoozed item's wake changes the page and the counts as an expiry does.
  if NEXT_WAKE ~= "" and (until_ == "" or tonumber(NEXT_WAKE) < tonumber(until_)) then until_ = NEXT_WAKE end
  local after_now = "(" .. NOW_ARG
  local shows = call("ZRANGEBYSCORE", bulletin_config_key, after_now, "+inf", "WITHSCORES", "LIMIT", 0, 1)
  if #shows == 2 and (until_ == "" or tonumber(shows[2]) < tonumber(until_)) then until_ = shows[2] end
  return until_
end

-- The value held under field if its tag is current, else nil.
local function cache_held(field, tag)
  local held = call("HMGET", pages_key, field .. "#", field)
  if held[1] and held[2] then
    local cut = string.find(held[1], CACHE_UNTIL, 1, true)
    if not cut then return nil end
    local held_tag, until_ = string.sub(held[1], 1, cut - 1), string.sub(held[1], cut + 1)
    if held_tag == tag and (until_ == "" or NOW < tonumber(until_)) then return held[2] end
  end
  return nil
end
