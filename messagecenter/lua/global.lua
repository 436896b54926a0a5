-- Changes to the global read model, atomically. Every key carries the global
-- hash tag, so this runs on one Redis Cluster slot.
--
-- KEYS: 1 item detail hash, 2 bulletin_notification_config zset, 3 bulletin
-- detail hash, 4 bulletin members hash, 5 bulletin:update:time, 6 removed
-- zset, 7 removed version, 8 pull zset, 9 pull sequence, 10 removed floor,
-- 11 item detail version (bumped when a detail is written over: inbox.lua's
-- page cache is current only while it has not moved).
-- ARGV: 1 op, 2 now (ms), then the op's arguments.

local op = ARGV[1]
local now = tonumber(ARGV[2])

-- The marker only grows, even with equal clocks: readers remember the value
-- they took in and merge again only when it moved.
local function bump_update_time()
  local old = tonumber(redis.call("GET", KEYS[5]) or "0")
  local value = now
  if value <= old then value = old + 1 end
  redis.call("SET", KEYS[5], string.format("%d", value))
end

local function drop_bulletin_config(bid)
  local old = redis.call("HGET", KEYS[4], bid)
  if old then
    for member in string.gmatch(old, "[^,]+") do
      redis.call("ZREM", KEYS[2], member)
      redis.call("HDEL", KEYS[3], member)
    end
  end
  redis.call("HDEL", KEYS[4], bid)
end

-- An item's detail changed (an edit; not a rewrite of the same JSON) moves the details'
-- version: inbox.lua's page cache holds rendered details. New items and
-- removals leave it alone (readers merge or settle those anyway).
local function detail_put(ref, json)
  local old = redis.call("HGET", KEYS[1], ref)
  if old == json then return end
  redis.call("HSET", KEYS[1], ref, json)
  if old then redis.call("INCR", KEYS[11]) end
end

-- Users settle removals above their version on their next read.
local function mark_removed(member)
  if member == "" then return end
  local version = redis.call("INCR", KEYS[7])
  redis.call("ZADD", KEYS[6], version, member)
end

if op == "item_put" then
  detail_put(ARGV[3], ARGV[4])
  return 1

elseif op == "bulletin_put" then
  -- ARGV: 3 bulletin id, 4 ref, 5 item JSON, 6 member to remove everywhere
  -- ("" for a new bulletin), 7 n, then n x (config member, display ms, JSON).
  local bid = ARGV[3]
  drop_bulletin_config(bid)
  detail_put(ARGV[4], ARGV[5])
  local n = tonumber(ARGV[7])
  local members = {}
  for i = 0, n - 1 do
    local member, score, json = ARGV[8 + 3 * i], ARGV[9 + 3 * i], ARGV[10 + 3 * i]
    redis.call("ZADD", KEYS[2], score, member)
    redis.call("HSET", KEYS[3], member, json)
    members[#members + 1] = member
  end
  redis.call("HSET", KEYS[4], bid, table.concat(members, ","))
  mark_removed(ARGV[6])
  bump_update_time()
  return n

elseif op == "bulletin_delete" then
  -- ARGV: 3 bulletin id, 4 ref, 5 inbox member
  drop_bulletin_config(ARGV[3])
  redis.call("HDEL", KEYS[1], ARGV[4])
  mark_removed(ARGV[5])
  bump_update_time()
  return 1

elseif op == "pull_register" then
  -- ARGV: 3 ref, 4 item JSON, 5 pull member. Registering twice is a no-op.
  detail_put(ARGV[3], ARGV[4])
  if redis.call("ZSCORE", KEYS[8], ARGV[5]) then return 0 end
  local seq = redis.call("INCR", KEYS[9])
  redis.call("ZADD", KEYS[8], seq, ARGV[5])
  return seq

elseif op == "remove_item" then
  -- ARGV: 3 ref, 4 inbox member, 5 pull member ("" for push items)
  redis.call("HDEL", KEYS[1], ARGV[3])
  if ARGV[5] ~= "" then redis.call("ZREM", KEYS[8], ARGV[5]) end
  mark_removed(ARGV[4])
  return 1

elseif op == "removed_trim" then
  -- ARGV: 3 entries to keep. Users whose settled version is below the new
  -- floor re-check their whole inbox against the details on their next read.
  local keep = tonumber(ARGV[3])
  local n = redis.call("ZCARD", KEYS[6])
  if n <= keep then return 0 end
  local last = redis.call("ZRANGE", KEYS[6], n - keep - 1, n - keep - 1, "WITHSCORES")
  redis.call("ZREMRANGEBYRANK", KEYS[6], 0, n - keep - 1)
  redis.call("SET", KEYS[10], last[2])
  return n - keep
end
return redis.error_reply("unknown op " .. tostring(op))
