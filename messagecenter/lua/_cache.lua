-- Shared by page.lua and counts.lua (after the inbox preambles), which
-- name its keys.
--
-- Read cache (fast path): the user's
-- page-cache hash keeps rendered first pages and the counts, each under a
-- field with "<tag>|<valid until>" under the field plus "#". The tag is every
-- value they depend on: the user's rev, the live version deliveries bump, the
-- item details' version edits bump, and what level() compared. Valid until:
-- the earliest expiry in the inbox or the next bulletin display time,
-- whichever comes first (time moves them then, no write does). While the tag
-- is unchanged and that time has not come, a stored value is what a
-- computation now would give. readmodel/inbox.py checks the same tag without
-- a script (_cache_check_commands, _cache_checked): keep the parts' order
-- equal (test_page_cache holds the two answers equal).
local pages_key, live_version_key = nil, nil

local function cache_tag()
  local rev = LEVEL_REV
  if TOUCHED then rev = call("HGET", state_key, "rev") or "0" end
  return rev .. ":" .. (call("GET", live_version_key) or "0") .. ":" .. LEVEL_TAIL
end

local function cache_until()
  local until_ = NEXT_EXPIRY
  local after_now = "(" .. NOW_ARG
  local shows = call("ZRANGEBYSCORE", bulletin_config_key, after_now, "+inf", "WITHSCORES", "LIMIT", 0, 1)
  if #shows == 2 and (until_ == "" or tonumber(shows[2]) < tonumber(until_)) then until_ = shows[2] end
  return until_
end

-- The value held under field if its tag is current, else nil.
local function cache_held(field, tag)
  local held = call("HMGET", pages_key, field .. "#", field)
  if held[1] and held[2] then
    local t, until_ = string.match(held[1], "^([^|]*)|([^|]*)$")
    if t == tag and (until_ == "" or NOW < tonumber(until_)) then return held[2] end
  end
  return nil
end
