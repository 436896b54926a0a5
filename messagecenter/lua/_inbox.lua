-- Shared by the per-user inbox scripts (after _item.lua): remove, the
-- merge's add, expiry, trim, the fast path's check and open_inbox, which
-- names the user's keys from KEYS and ARGV.

-- The global markers' keys (fast path only, single Redis).
local removal_version_key, pull_sequence_key, bulletin_update_key = nil, nil, nil
local bulletin_config_key, detail_key, detail_version_key, pending_key = nil, nil, nil, nil
local NOW, NOW_ARG, FAST, TOUCHED = 0, "0", false, false

local function touch()
  if not TOUCHED then
    call("HINCRBY", state_key, "rev", 1)
    TOUCHED = true
  end
end

-- nil when the month's bitmap was not passed (the caller's view of the
-- months set was older than this item): such items are left alone.
local function read_bit(month, off)
  local key = READ[month]
  if not key then return nil end
  return call("GETBIT", key, off)
end

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

-- Is the member a live item of this inbox ("is readable": pushed and present)?
local function present(member)
  local ref, cat, month, off = parse(member)
  if not ref or not READ[month] then return false end
  if not call("ZSCORE", all_key, member) then return false end
  return call("GETBIT", PUSH[month], off) == 1
end

-- Ever-read bits (never cleared by "unread"): a read bit going 0 -> 1 is a
-- first read only when the ever-read bit was 0, so read/unread/read counts once.
local function first_read(month, off)
  local key = EVER[month]
  return call("SETBIT", key, off, 1) == 0
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

-- What level() read that the read cache's tag needs too.
local LEVEL_REV, LEVEL_TAIL = "0", ""

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
  LEVEL_REV = state[4] or "0"
  LEVEL_TAIL = table.concat({marks[4] or "0", marks[1] or "0", marks[2] or "0", marks[3] or "0", state[3], access}, ":")
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

-- Names one user's inbox for a script (readmodel/scripts.py builds the call):
-- KEYS: 1 all-items zset, 2..5 category zsets (CATEGORIES order), 6 unread
-- counters hash, 7 hidden set, 8 expiry zset, 9 months set, 10 state hash,
-- 11 bulletin access time; then the script's own `own_keys` keys (named at
-- its top); on the fast path the 7 global keys below; then n read bitmaps, n
-- push bitmaps and, `with_ever`, n ever-read bitmaps, one per month.
-- ARGV: the script's own `own_args` arguments, then now (ms), n, the n
-- months, then the mode: "0" run as is, "1" + the planned settle and merge's
-- arguments, "2" + the most items kept: the fast path (single Redis only:
-- the global keys live in another cluster slot), which checks atomically what
-- the caller's planning would have checked (nothing to settle or merge, every
-- month of the user passed), then settles expiry. False when that check
-- fails: the script then answers "STALE" having changed nothing, and the
-- caller plans (the slower, cluster-safe route).
local function open_inbox(own_keys, own_args, with_ever)
  all_key, counters_key, hidden_key, expiry_key = KEYS[1], KEYS[6], KEYS[7], KEYS[8]
  months_key, state_key, access_key = KEYS[9], KEYS[10], KEYS[11]
  for i, cat in ipairs(CATEGORIES) do category_keys[cat] = KEYS[1 + i] end
  local a = own_args + 1
  NOW_ARG = ARGV[a]
  NOW = tonumber(NOW_ARG)
  local n = tonumber(ARGV[a + 1])
  local mode = ARGV[a + 2 + n]
  local g = 11 + own_keys
  local b = g
  if mode == "2" then b = g + 7 end
  for i = 1, n do
    local month = ARGV[a + 1 + i]
    MONTHS[i] = month
    READ[month] = KEYS[b + i]
    PUSH[month] = KEYS[b + n + i]
    if with_ever then EVER[month] = KEYS[b + 2 * n + i] end
  end
  a = a + 3 + n
  if mode == "2" then
    FAST = true
    removal_version_key, pull_sequence_key, bulletin_update_key = KEYS[g + 1], KEYS[g + 2], KEYS[g + 3]
    bulletin_config_key, detail_key, detail_version_key = KEYS[g + 4], KEYS[g + 5], KEYS[g + 6]
    pending_key = KEYS[g + 7]
    if not level() then return false end
    settle_expired()
    trim(tonumber(ARGV[a]))
  elseif mode == "1" then
    settle_and_merge(a)
  end
  return true
end

-- The unread counters (flat) and how many items are newer than the seen
-- watermark (a time on the score axis; unseen = ZCOUNT (seen_time, +inf]).
local function counts()
  local flat = call("HGETALL", counters_key)
  local seen_time = call("HGET", state_key, "seen") or "-inf"
  if seen_time ~= "-inf" then seen_time = "(" .. seen_time end
  return {flat, call("ZCOUNT", all_key, seen_time, "+inf")}
end
