-- Shared by the per-user inbox scripts (after _item.lua, _state.lua,
-- _batch.lua and _steps.lua): removal, the merge's add, waking, expiry and
-- trim (_merge.lua then holds the fast path's check and the planned settle
-- and merge that open_inbox runs).

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
  call("ZREM", arrivals_key, member)  -- (one not placed yet holds nothing else)
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
local function wake_due(due)
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
end

local function wake_snoozed()
  if not snoozed_key then return end
  local first = call("ZRANGE", snoozed_key, 0, 0, "WITHSCORES")
  if #first == 2 and tonumber(first[2]) <= NOW then
    local n = take(STEP)
    if n > 0 then
      local due = call("ZRANGEBYSCORE", snoozed_key, "-inf", NOW, "WITHSCORES", "LIMIT", 0, n)
      BUDGET = BUDGET + (n - #due / 2)
      wake_due(due)
      first = call("ZRANGE", snoozed_key, 0, 0, "WITHSCORES")
    end
    if #first == 2 and tonumber(first[2]) <= NOW then MORE = true end
  end
  if #first == 2 then NEXT_WAKE = first[2] else NEXT_WAKE = "" end
end
-- <<< archive and snooze <<<

-- Expiry is exact: an item whose expire_at has come is gone from every view
-- (a step a call; MORE: the caller calls again before it answers).
local function settle_expired()
  settle_evicted()  -- caps on write
  local first = call("ZRANGE", expiry_key, 0, 0, "WITHSCORES")
  if #first == 2 and tonumber(first[2]) <= NOW then
    local n = take(STEP)
    if n > 0 then
      local due = call("ZRANGEBYSCORE", expiry_key, "-inf", NOW, "LIMIT", 0, n)
      BUDGET = BUDGET + (n - #due)
      -- Live ones leave in a few commands; parked, stray or unknown ones one by one.
      local live, held = {}, {}
      if #due > 0 then held = call("ZMSCORE", all_key, unpack(due)) end
      for i, member in ipairs(due) do
        if held[i] and removable(member) then
          live[#live + 1] = member
        else
          local _, _, month = parse(member)  -- a stray entry goes (a month not passed keeps its own)
          if remove(member) == 0 and (not month or READ[month]) then call("ZREM", expiry_key, member) end
        end
      end
      remove_live(live)
      first = call("ZRANGE", expiry_key, 0, 0, "WITHSCORES")
    end
    if #first == 2 and tonumber(first[2]) <= NOW then
      MORE = true
      EXPIRY_LEFT = true
    end
  end
  if #first == 2 then NEXT_EXPIRY = first[2] else NEXT_EXPIRY = "" end
  wake_snoozed()  -- archive and snooze
end

-- The newest max_items stay, at most a step leaving a call (an inbox filled
-- before caps on write). Only once no expired member is left: counted in the
-- size, they would make it drop live items the cap keeps.
local function trim(max_items)
  if EXPIRY_LEFT then return end
  local extra = call("ZCARD", all_key) - max_items
  if extra <= 0 then return end
  local n = take(extra)
  if n < extra then MORE = true end
  if n == 0 then return end
  local live = {}
  for _, member in ipairs(call("ZRANGE", all_key, 0, n - 1)) do
    if removable(member) then live[#live + 1] = member end  -- others are left alone, as remove() leaves them
  end
  remove_live(live)
end
