-- Shared by the per-user inbox scripts (after _item.lua, _state.lua and
-- _settle.lua): open_inbox names the user's keys from KEYS and ARGV and
-- settles or merges as the caller asked.

-- Names one user's inbox for a script (readmodel/scripts.py builds the call):
-- KEYS: 1 all-items zset, 2..5 category zsets (CATEGORIES order), 6 unread
-- counters hash, 7 hidden set, 8 expiry zset, 9 months set, 10 state hash,
-- 11 bulletin access time; then the script's own `own_keys` keys (named at
-- its top); on the fast path the 7 global keys below; then n read bitmaps, n
-- push bitmaps and, `with_ever`, n ever-read bitmaps, one per month; last the
-- groups hash, the unread zsets (all, then CATEGORIES order), the evicted set,
-- the arrivals, the archived and snoozed zsets.
-- ARGV: the script's own `own_args` arguments, then now (ms), n, the n
-- months, then the mode and, except for "0", the most members one settling
-- step removes (ib.step, _state.lua): "0" run as is, "1" + the planned settle and
-- merge's arguments, "3" + the most items kept: settle only (what is left
-- after an "AGAIN"), "2" + the most items kept: the fast path (single Redis only:
-- the global keys live in another cluster slot), which checks atomically what
-- the caller's planning would have checked (nothing to settle or merge, every
-- month of the user passed), then settles expiry. When that check
-- fails, the script answers "STALE" having changed nothing, and the
-- caller plans (the slower, cluster-safe route).
-- Settling is bounded (caps on write): every step of one call shares a
-- budget of ib.step members; when a step left members for later
-- (ib.more), the inbox is not opened either and the script answers "AGAIN"
-- before its own work (ib.not_open names the answer): the caller repeats the call in
-- mode "3" until the inbox is settled, so every answer is an exact one.
-- The last ARGV is "<generation>:<idle ms>:<grace ms>" on a checked call (a
-- user-facing read or mark): the generation the user's part of the read
-- model must be filled for ("" with healing off), how long it stays without
-- a checked call, and how long a write of the user may be in flight; "" on
-- an unchecked one (the fill's own writes, background jobs). The state
-- hash's "fill" field names the generation it was filled for; any other
-- value (nothing after a loss or an idle expiry, an older one on a stale
-- replica) answers "UNFILLED" having changed nothing, and the caller fills
-- the user from PostgreSQL (messagecenter/fill.py). So does a write of the
-- user in flight for longer than the grace: each write notes itself in the
-- state hash before its commit ("w:<token>" = its start, "w" = how many)
-- and goes once its Redis half is done, so one still there after the grace
-- belongs to a process that died between the two, and Redis may lack what
-- PostgreSQL committed. A filled user's state hash lives on for the idle
-- time from each checked call.
-- A checked settling call that finds the row of a group of several items
-- expired answers "REGROUP" having changed nothing (group_row_expired); so
-- does one whose settling meets such a row that a delivery keeping the cap
-- evicted (settle_evicted), after settling it: either way the caller fills
-- the user again. An unchecked call removes the row; the full cleanup's drop
-- of the user's part mends that.

-- Whether a listed row of a group of several items has expired. Its removal
-- would hide the rest of its group, whose next row Redis cannot name (the
-- items' details and expiry times live in another slot); PostgreSQL re-forms
-- the group, so the caller fills the user again from it. One command when
-- nothing is due.
local function group_row_expired(ib)
  local due = call("ZRANGEBYSCORE", ib.expiry_key, "-inf", ib.now, "LIMIT", 0, ib.step)
  if #due == 0 then return false end
  local refs = {}
  for i, member in ipairs(due) do refs[i] = string.match(member, "^[^|]*") end
  local groups = call("HMGET", ib.groups_key, unpack(refs))
  for i, member in ipairs(due) do
    if groups[i] and cjson.decode(groups[i]).count > 1 and call("ZSCORE", ib.all_key, member) then return true end
  end
  return false
end

-- The call's inbox (inbox_state), opened: settled and merged as the caller
-- asked, or with not_open set to the answer the script returns at once.
local function open_inbox(own_keys, own_args, with_ever)
  local ib = inbox_state()
  ib.all_key, ib.counters_key, ib.hidden_key, ib.expiry_key = KEYS[1], KEYS[6], KEYS[7], KEYS[8]
  ib.months_key, ib.state_key, ib.access_key = KEYS[9], KEYS[10], KEYS[11]
  local arg_pos = own_args + 1  -- walks ARGV past what has been read
  ib.now_arg = ARGV[arg_pos]
  ib.now = tonumber(ib.now_arg)
  local checked = ARGV[#ARGV] ~= ""
  ib.checked = checked
  if checked then
    local generation, idle, grace = string.match(ARGV[#ARGV], "^(.*):(%d+):(%d+)$")
    -- (no generation: healing is off, every user's part counts as filled and stays)
    if generation ~= "" then
      local state = redis.call("HMGET", ib.state_key, "fill", "w")
      ib.writing = state[2] or "0"
      if state[1] ~= generation or (state[2] and write_dead(ib, tonumber(grace))) then
        ib.not_open = "UNFILLED"
        return ib
      end
      redis.call("PEXPIRE", ib.state_key, idle)
    end
  end
  for i, cat in ipairs(CATEGORIES) do ib.category_keys[cat] = KEYS[1 + i] end
  local month_count = tonumber(ARGV[arg_pos + 1])
  local mode = ARGV[arg_pos + 2 + month_count]
  local global_base = 11 + own_keys  -- the fast path's global keys follow the script's own
  local bitmap_base = global_base  -- the month bitmaps follow those, when sent
  if mode == "2" then bitmap_base = global_base + 7 end
  for i = 1, month_count do
    local month = ARGV[arg_pos + 1 + i]
    ib.months[i] = month
    ib.read[month] = KEYS[bitmap_base + i]
    ib.push[month] = KEYS[bitmap_base + month_count + i]
    if with_ever then ib.ever[month] = KEYS[bitmap_base + 2 * month_count + i] end
  end
  arg_pos = arg_pos + 3 + month_count
  if mode ~= "0" then
    ib.step = tonumber(ARGV[arg_pos])
    ib.budget = ib.step
    arg_pos = arg_pos + 1
  end
  -- archive and snooze: the archived and snoozed zsets close KEYS (after the bitmaps).
  ib.archived_key, ib.snoozed_key = KEYS[#KEYS - 1], KEYS[#KEYS]
  -- unread zsets, the evicted set and the arrivals: just before those.
  ib.groups_key, ib.unread_all_key = KEYS[#KEYS - 9], KEYS[#KEYS - 8]
  ib.evicted_key, ib.arrivals_key = KEYS[#KEYS - 3], KEYS[#KEYS - 2]
  for i, cat in ipairs(CATEGORIES) do ib.unread_keys[cat] = KEYS[#KEYS - 8 + i] end
  if mode == "2" then
    ib.fast = true
    ib.removal_version_key, ib.pull_sequence_key = KEYS[global_base + 1], KEYS[global_base + 2]
    ib.bulletin_update_key, ib.bulletin_config_key = KEYS[global_base + 3], KEYS[global_base + 4]
    ib.detail_key, ib.detail_version_key = KEYS[global_base + 5], KEYS[global_base + 6]
    ib.pending_key = KEYS[global_base + 7]
    if not level(ib) then
      ib.not_open = "STALE"
      return ib
    end
  end
  if checked and mode ~= "0" and group_row_expired(ib) then
    ib.not_open = "REGROUP"
    return ib
  end
  if mode == "1" then
    settle_and_merge(ib, arg_pos)  -- (expiry and the trim included)
  elseif mode == "2" or mode == "3" then
    settle_expired(ib)
    trim(ib, tonumber(ARGV[arg_pos]))
  end
  if mode ~= "0" then
    -- Arrivals after the trim (what it takes is never placed), the unread
    -- zsets last, so a trim's members are never walked.
    settle_arrivals(ib)
    backfill_unread(ib)
  end
  if ib.regroup then
    ib.not_open = "REGROUP"
  elseif ib.more then
    ib.not_open = "AGAIN"
  end
  return ib
end
