-- Shared by the per-user inbox scripts (after _item.lua): the call's state
-- (now, the fast path's global marker keys, whether anything changed) and
-- the read marks and counters every operation reads.

-- The call's state lives in the inbox `ib` that open_inbox builds
-- (inbox_state below names every field): now, the fast path's global
-- marker keys, whether anything changed (touched), and the settling budget.
-- Bounded settling (caps on write): at most ib.step members settled
-- (removed, woken, evicted, trimmed or walked into the unread zsets) in one
-- call, all steps together: ib.budget is what this call has left (take).
-- ib.more when some were left for the next call (open_inbox then answers
-- "AGAIN" and the caller calls again); ib.expiry_left when expired members
-- were (trim waits).

-- A new call's inbox: every field a helper may read, with its start value.
-- open_inbox binds the keys (all_key .. access_key, category_keys,
-- unread_all_key, unread_keys, evicted_key, arrivals_key, groups_key,
-- archived_key, snoozed_key; on the fast path the global markers'
-- removal_version_key .. pending_key) and the months' bitmaps; a script
-- binds its own (_cache.lua's pages_key, live_version_key).
local function inbox_state()
  return {
    category_keys = {}, unread_keys = {},
    read = {}, push = {}, ever = {}, months = {},  -- month -> bitmap key; the months in order
    forms = {},  -- the bit-sets' forms (_bits.lua)
    now = 0, now_arg = "0",
    fast = false,  -- the fast path (mode "2")
    touched = false,  -- the state hash's rev moved in this call (touch)
    step = 200, budget = 200, more = false, expiry_left = false, arrivals_left = false,
    checked = false,  -- a user-facing call
    regroup = false,  -- settling met a group that PostgreSQL must re-form (settle_evicted)
    next_wake = "", next_expiry = "",  -- the earliest wake and expiry still ahead ("" = none)
    levels = {},  -- what level() read that the read cache's tag needs too
    writing = false,  -- the state hash's count of the user's writes in flight, when read ("0": none)
    write_due = false,  -- when the oldest of those is taken for dead (ms), if any
    not_open = nil,  -- why the inbox could not be opened: the script's answer
  }
end

-- Whether a write of the user noted in the state hash has been in flight
-- for longer than the grace; sets ib.write_due to when the oldest one is
-- (a read cache entry is current only until then). Runs only while the
-- count says some are, so a user nobody writes for pays one HMGET field.
local function write_dead(ib, grace)
  local flat = call("HGETALL", ib.state_key)
  local oldest = nil
  for i = 1, #flat, 2 do
    if string.sub(flat[i], 1, 2) == "w:" then
      local started = tonumber(flat[i + 1])
      if oldest == nil or started < oldest then oldest = started end
    end
  end
  if oldest == nil then return false end
  ib.write_due = oldest + grace
  return ib.now >= ib.write_due
end

-- Up to n of the call's budget (0 when it is spent): a step asks before it
-- walks, and a step that got less than it needed sets ib.more.
local function take(ib, n)
  if n > ib.budget then n = ib.budget end
  if n < 0 then n = 0 end
  ib.budget = ib.budget - n
  return n
end

local function touch(ib)
  if not ib.touched then
    call("HINCRBY", ib.state_key, "rev", 1)
    ib.touched = true
  end
end

-- nil when the month's bitmap was not passed (the caller's view of the
-- months set was older than this item): such items are left alone.
local function read_bit(ib, month, off)
  local key = ib.read[month]
  if not key then return nil end
  return bits_get(ib.forms, key, off)
end

-- Is the member a live item of this inbox ("is readable": pushed and present)?
-- An arrival takes its places first: a script that acts on one member never
-- waits for the others to be placed.
local function present(ib, member)
  local ref, cat, month, off = parse(member)
  if not ref or not ib.read[month] then return false end
  local time = call("ZSCORE", ib.all_key, member)
  if not time then return false end
  if ib.category_keys[cat] and call("ZREM", ib.arrivals_key, member) == 1 then
    place(ib, member, cat, month, off, time)
    touch(ib)
  end
  return bits_get(ib.forms, ib.push[month], off) == 1
end

-- Ever-read bits (never cleared by "unread"): a read bit going 0 -> 1 is a
-- first read only when the ever-read bit was 0, so read/unread/read counts once.
local function first_read(ib, month, off)
  local key = ib.ever[month]
  return bits_set(ib.forms, key, off, 1) == 0
end

-- The unread counters (flat) and how many items are newer than the seen
-- watermark (a time on the score axis; unseen = ZCOUNT (seen_time, +inf]).
local function counts(ib)
  local flat = call("HGETALL", ib.counters_key)
  local seen_time = call("HGET", ib.state_key, "seen") or "-inf"
  if seen_time ~= "-inf" then seen_time = "(" .. seen_time end
  return {flat, call("ZCOUNT", ib.all_key, seen_time, "+inf")}
end
