-- Shared by the per-user inbox scripts (after _item.lua, _state.lua and _steps.lua):
-- removal, the merge's add, expiry, trim, the fast path's check (level) and
-- the planned settle and merge that open_inbox runs.

-- >>> archive and snooze (park.lua's keys; open_inbox binds them) >>>
-- A parked member (archived or snoozed) left all, its category zset and its
-- push bit (so it is in no count), keeps its expiry entry and read bit, and
-- its ref sits in the hidden set (no merge or fan-out rerun brings it back).
local archived_key, snoozed_key = nil, nil
local NEXT_WAKE = ""  -- the earliest wake time still ahead ("" = none)

-- A removal (retraction, expiry) of a parked member: 1 if it was parked.
local function unpark_removed(member)
  if not archived_key then return 0 end
  local gone = call("ZREM", archived_key, member) + call("ZREM", snoozed_key, member)
  if gone == 0 then return 0 end
  call("ZREM", expiry_key, member)
  touch()
  return 1
end
-- <<< archive and snooze <<<

local function remove(member)
  local ref, cat, month, off = parse(member)
  if not ref or not category_keys[cat] then return 0 end
  local bit = read_bit(month, off)
  if bit == nil then return 0 end
  if call("ZREM", all_key, member) == 0 then return unpark_removed(member) end
  call("ZREM", category_keys[cat], member)
  call("ZREM", expiry_key, member)
  bits_set(PUSH[month], off, 0)
  if bit == 0 and unread_drop(member, cat) == 1 then call("HINCRBY", counters_key, cat, -1) end  -- (unread zsets)
  touch()
  return 1
end

-- The merge's add: an item already expired stays out.
local function add(member, time, expire)
  local ref, cat, month, off = parse(member)
  if not ref or not category_keys[cat] or not READ[month] then return 0 end
  if expire > 0 and expire <= NOW then return 0 end
  if not insert(member, ref, cat, month, off, time, expire, expire > 0) then return 0 end
  touch()
  return 1
end

-- The earliest expiry still ahead once settled ("" = none).
local NEXT_EXPIRY = ""

-- >>> archive and snooze: snoozed members whose time has come are back,
-- unread, at their wake time (the bit was cleared when snoozed; again here
-- so a replayed snooze cannot leave it set) >>>
local function wake_snoozed()
  if not snoozed_key then return end
  local due = call("ZRANGEBYSCORE", snoozed_key, "-inf", NOW, "WITHSCORES", "LIMIT", 0, STEP)
  if #due == 2 * STEP then MORE = true end
  for i = 1, #due, 2 do
    local member, wake = due[i], due[i + 1]
    local ref, cat, month, off = parse(member)
    call("ZREM", snoozed_key, member)
    if ref and category_keys[cat] and READ[month] then
      call("SREM", hidden_key, ref)
      bits_set(READ[month], off, 0)
      local expire = call("ZSCORE", expiry_key, member)
      insert(member, ref, cat, month, off, wake, expire or 0, expire and true or false)
      touch()
    end
  end
  local first = call("ZRANGE", snoozed_key, 0, 0, "WITHSCORES")
  if #first == 2 then NEXT_WAKE = first[2] else NEXT_WAKE = "" end
end
-- <<< archive and snooze <<<

-- Expiry is exact: an item whose expire_at has come is gone from every view
-- (at most STEP a call; MORE: the caller calls again before it answers).
local function settle_expired()
  settle_evicted()  -- caps on write
  local first = call("ZRANGE", expiry_key, 0, 0, "WITHSCORES")
  if #first == 2 and tonumber(first[2]) <= NOW then
    local due = call("ZRANGEBYSCORE", expiry_key, "-inf", NOW, "LIMIT", 0, STEP)
    for _, member in ipairs(due) do
      local _, _, month = parse(member)  -- a stray entry goes (a month not passed keeps its own)
      if remove(member) == 0 and (not month or READ[month]) then call("ZREM", expiry_key, member) end
    end
    first = call("ZRANGE", expiry_key, 0, 0, "WITHSCORES")
    if #first == 2 and tonumber(first[2]) <= NOW then MORE = true end
  end
  if #first == 2 then NEXT_EXPIRY = first[2] else NEXT_EXPIRY = "" end
  wake_snoozed()  -- archive and snooze
end

-- The newest max_items stay, at most STEP leaving a call (an inbox filled before caps on write).
local function trim(max_items)
  local extra = call("ZCARD", all_key) - max_items
  if extra > STEP then extra, MORE = STEP, true end
  if extra > 0 then
    for _, member in ipairs(call("ZRANGE", all_key, 0, extra - 1)) do remove(member) end
  end
end

-- What level() read that the read cache's tag needs too, by the tag's
-- names (readcache.TAG): _cache.lua adds the rest.
local LEVEL = {}

-- Would planning find nothing to settle or merge? Mirrors readmodel/inbox.py _plan.
local function level()
  for _, month in ipairs(call("SMEMBERS", months_key)) do
    if not READ[month] then return false end
  end
  -- "bd" (bulletin display): display time (ms) of the latest bulletin merged
  -- into this inbox; a due bulletin displayed later still needs merging.
  local state = call("HMGET", state_key, "settled", "pull", "bd", "rev")
  local settled, pulled, bulletins_shown, rev = state[1], state[2], state[3], state[4]
  local access = call("GET", access_key)
  if not access or not bulletins_shown then return false end
  local marks = call("MGET", removal_version_key, pull_sequence_key, bulletin_update_key, detail_version_key)
  if tonumber(marks[1] or "0") > tonumber(settled or "0") then return false end
  if tonumber(marks[2] or "0") > tonumber(pulled or "0") then return false end
  if tonumber(marks[3] or "0") > tonumber(access) then return false end
  local latest = call("ZREVRANGEBYSCORE", bulletin_config_key, NOW, "-inf", "WITHSCORES", "LIMIT", 0, 1)
  if #latest == 2 and tonumber(latest[2]) > tonumber(bulletins_shown) then return false end
  LEVEL = {rev = rev or "0", details = marks[4] or "0", removed = marks[1] or "0", pulled = marks[2] or "0",
           updated = marks[3] or "0", shown = bulletins_shown, access = access}
  return true
end

-- The planned settle and merge (mode "1"), from ARGV[arg_pos]: the removal version
-- settled to ("" = unchanged), removals, merge candidates (member, time,
-- expiry ms), then the markers taken in (bulletin access, display, pull
-- sequence; "" = unchanged) and the most items an inbox keeps.
local function settle_and_merge(arg_pos)
  local settled, removal_count = ARGV[arg_pos], tonumber(ARGV[arg_pos + 1])
  arg_pos = arg_pos + 2
  for i = 0, removal_count - 1 do remove(ARGV[arg_pos + i]) end
  arg_pos = arg_pos + removal_count
  settle_expired()
  local candidate_count = tonumber(ARGV[arg_pos])
  arg_pos = arg_pos + 1
  for i = 0, candidate_count - 1 do
    add(ARGV[arg_pos + 3 * i], tonumber(ARGV[arg_pos + 3 * i + 1]), tonumber(ARGV[arg_pos + 3 * i + 2]))
  end
  arg_pos = arg_pos + 3 * candidate_count
  if settled ~= "" then call("HSET", state_key, "settled", settled) end
  if ARGV[arg_pos] ~= "" then call("SET", access_key, ARGV[arg_pos]) end
  -- "bd": display time of the latest bulletin merged (see level()).
  if ARGV[arg_pos + 1] ~= "" then call("HSET", state_key, "bd", ARGV[arg_pos + 1]) end
  if ARGV[arg_pos + 2] ~= "" then call("HSET", state_key, "pull", ARGV[arg_pos + 2]) end
  trim(tonumber(ARGV[arg_pos + 3]))
end
