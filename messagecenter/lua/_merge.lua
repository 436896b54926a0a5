-- Shared by the per-user inbox scripts (after _settle.lua, before
-- _inbox.lua): the fast path's check (level) and the planned settle and
-- merge (mode "1") that open_inbox runs.

-- What level() read that the read cache's tag needs too goes to ib.levels,
-- by the tag's names (readcache.TAG): _cache.lua adds the rest.

-- Would planning find nothing to settle or merge? Mirrors readmodel/inbox.py _plan.
local function level(ib)
  for _, month in ipairs(call("SMEMBERS", ib.months_key)) do
    if not ib.read[month] then return false end
  end
  -- "bd" (bulletin display): display time (ms) of the latest bulletin merged
  -- into this inbox; a due bulletin displayed later still needs merging.
  local state = call("HMGET", ib.state_key, "settled", "pull", "bd", "rev")
  local settled, pulled, bulletins_shown, rev = state[1], state[2], state[3], state[4]
  local access = call("GET", ib.access_key)
  if not access or not bulletins_shown then return false end
  local marks = call("MGET", ib.removal_version_key, ib.pull_sequence_key, ib.bulletin_update_key,
                     ib.detail_version_key)
  if tonumber(marks[1] or "0") > tonumber(settled or "0") then return false end
  if tonumber(marks[2] or "0") > tonumber(pulled or "0") then return false end
  if tonumber(marks[3] or "0") > tonumber(access) then return false end
  local latest = call("ZREVRANGEBYSCORE", ib.bulletin_config_key, ib.now, "-inf", "WITHSCORES", "LIMIT", 0, 1)
  if #latest == 2 and tonumber(latest[2]) > tonumber(bulletins_shown) then return false end
  ib.levels = {rev = rev or "0", details = marks[4] or "0", removed = marks[1] or "0", pulled = marks[2] or "0",
           updated = marks[3] or "0", shown = bulletins_shown, access = access}
  return true
end

-- The planned settle and merge (mode "1"), from ARGV[arg_pos]: the removal version
-- settled to ("" = unchanged), removals, merge candidates (member, time,
-- expiry ms), then the markers taken in (bulletin access, display, pull
-- sequence; "" = unchanged) and the most items an inbox keeps.
local function settle_and_merge(ib, arg_pos)
  local settled, removal_count = ARGV[arg_pos], tonumber(ARGV[arg_pos + 1])
  arg_pos = arg_pos + 2
  for i = 0, removal_count - 1 do remove(ib, ARGV[arg_pos + i]) end
  arg_pos = arg_pos + removal_count
  settle_expired(ib)
  local candidate_count = tonumber(ARGV[arg_pos])
  arg_pos = arg_pos + 1
  for i = 0, candidate_count - 1 do
    add(ib, ARGV[arg_pos + 3 * i], tonumber(ARGV[arg_pos + 3 * i + 1]), tonumber(ARGV[arg_pos + 3 * i + 2]))
  end
  arg_pos = arg_pos + 3 * candidate_count
  if settled ~= "" then call("HSET", ib.state_key, "settled", settled) end
  if ARGV[arg_pos] ~= "" then call("SET", ib.access_key, ARGV[arg_pos]) end
  -- "bd": display time of the latest bulletin merged (see level()).
  if ARGV[arg_pos + 1] ~= "" then call("HSET", ib.state_key, "bd", ARGV[arg_pos + 1]) end
  if ARGV[arg_pos + 2] ~= "" then call("HSET", ib.state_key, "pull", ARGV[arg_pos + 2]) end
  trim(ib, tonumber(ARGV[arg_pos + 3]))
end
