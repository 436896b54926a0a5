-- Shared by the per-user inbox scripts (after _item.lua): the call's state
-- (now, the fast path's global marker keys, whether anything changed) and
-- the read marks and counters every operation reads.

-- The global markers' keys (fast path only, single Redis).
local removal_version_key, pull_sequence_key, bulletin_update_key = nil, nil, nil
local bulletin_config_key, detail_key, detail_version_key, pending_key = nil, nil, nil, nil
local NOW, NOW_ARG, FAST, TOUCHED = 0, "0", false, false
-- Bounded settling (caps on write): at most STEP members settled (removed,
-- woken, evicted, trimmed or walked into the unread zsets) in one call, all
-- steps together: BUDGET is what this call has left (take). MORE when some
-- were left for the next call (open_inbox then answers "AGAIN" and the
-- caller calls again); EXPIRY_LEFT when expired members were (trim waits).
local STEP, MORE, BUDGET, EXPIRY_LEFT = 200, false, 200, false
-- CHECKED on a user-facing call (open_inbox); REGROUP when its settling met
-- a group that PostgreSQL must re-form (settle_evicted).
local CHECKED, REGROUP = false, false

-- Up to n of the call's budget (0 when it is spent): a step asks before it
-- walks, and a step that got less than it needed sets MORE.
local function take(n)
  if n > BUDGET then n = BUDGET end
  if n < 0 then n = 0 end
  BUDGET = BUDGET - n
  return n
end

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
  return bits_get(key, off)
end

-- Is the member a live item of this inbox ("is readable": pushed and present)?
-- An arrival takes its places first: a script that acts on one member never
-- waits for the others to be placed.
local function present(member)
  local ref, cat, month, off = parse(member)
  if not ref or not READ[month] then return false end
  local time = call("ZSCORE", all_key, member)
  if not time then return false end
  if category_keys[cat] and call("ZREM", arrivals_key, member) == 1 then
    place(member, cat, month, off, time)
    touch()
  end
  return bits_get(PUSH[month], off) == 1
end

-- Ever-read bits (never cleared by "unread"): a read bit going 0 -> 1 is a
-- first read only when the ever-read bit was 0, so read/unread/read counts once.
local function first_read(month, off)
  local key = EVER[month]
  return bits_set(key, off, 1) == 0
end

-- The unread counters (flat) and how many items are newer than the seen
-- watermark (a time on the score axis; unseen = ZCOUNT (seen_time, +inf]).
local function counts()
  local flat = call("HGETALL", counters_key)
  local seen_time = call("HGET", state_key, "seen") or "-inf"
  if seen_time ~= "-inf" then seen_time = "(" .. seen_time end
  return {flat, call("ZCOUNT", all_key, seen_time, "+inf")}
end
