-- Shared by the per-user inbox scripts (after _item.lua and _state.lua):
-- removal, the merge's add, expiry, trim, the fast path's check (level) and
-- the planned settle and merge that open_inbox runs.

local function remove(member)
  local ref, cat, month, off = parse(member)
  if not ref or not category_keys[cat] then return 0 end
  local bit = read_bit(month, off)
  if bit == nil then return 0 end
  if call("ZREM", all_key, member) == 0 then return 0 end
  call("ZREM", category_keys[cat], member)
  call("ZREM", expiry_key, member)
  call("SETBIT", PUSH[month], off, 0)
  if bit == 0 then call("HINCRBY", counters_key, cat, -1) end
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

local function settle_expired()
  -- Expiry is exact: an item whose expire_at has come is gone from every view.
  local first = call("ZRANGE", expiry_key, 0, 0, "WITHSCORES")
  if #first == 2 and tonumber(first[2]) <= NOW then
    for _, member in ipairs(call("ZRANGEBYSCORE", expiry_key, "-inf", NOW)) do remove(member) end
    first = call("ZRANGE", expiry_key, 0, 0, "WITHSCORES")
  end
  if #first == 2 then NEXT_EXPIRY = first[2] else NEXT_EXPIRY = "" end
end

local function trim(max_items)
  local extra = call("ZCARD", all_key) - max_items
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
  local state = call("HMGET", state_key, "settled", "pull", "bd", "rev")
  local access = call("GET", access_key)
  if not access or not state[3] then return false end
  local marks = call("MGET", removal_version_key, pull_sequence_key, bulletin_update_key, detail_version_key)
  if tonumber(marks[1] or "0") > tonumber(state[1] or "0") then return false end
  if tonumber(marks[2] or "0") > tonumber(state[2] or "0") then return false end
  if tonumber(marks[3] or "0") > tonumber(access) then return false end
  local latest = call("ZREVRANGEBYSCORE", bulletin_config_key, NOW, "-inf", "WITHSCORES", "LIMIT", 0, 1)
  if #latest == 2 and tonumber(latest[2]) > tonumber(state[3]) then return false end
  LEVEL = {rev = state[4] or "0", details = marks[4] or "0", removed = marks[1] or "0", pulled = marks[2] or "0",
           updated = marks[3] or "0", shown = state[3], access = access}
  return true
end

-- The planned settle and merge (mode "1"), from ARGV[a]: the removal version
-- settled to ("" = unchanged), removals, merge candidates (member, time,
-- expiry ms), then the markers taken in (bulletin access, display, pull
-- sequence; "" = unchanged) and the most items an inbox keeps.
local function settle_and_merge(a)
  local settled, nrem = ARGV[a], tonumber(ARGV[a + 1])
  a = a + 2
  for i = 0, nrem - 1 do remove(ARGV[a + i]) end
  a = a + nrem
  settle_expired()
  local ncand = tonumber(ARGV[a])
  a = a + 1
  for i = 0, ncand - 1 do
    add(ARGV[a + 3 * i], tonumber(ARGV[a + 3 * i + 1]), tonumber(ARGV[a + 3 * i + 2]))
  end
  a = a + 3 * ncand
  if settled ~= "" then call("HSET", state_key, "settled", settled) end
  if ARGV[a] ~= "" then call("SET", access_key, ARGV[a]) end
  if ARGV[a + 1] ~= "" then call("HSET", state_key, "bd", ARGV[a + 1]) end
  if ARGV[a + 2] ~= "" then call("HSET", state_key, "pull", ARGV[a + 2]) end
  trim(tonumber(ARGV[a + 3]))
end
