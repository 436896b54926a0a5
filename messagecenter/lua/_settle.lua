-- Shared by the per-user inbox scripts (after _item.lua, _state.lua,
-- _batch.lua and _steps.lua): removal, the merge's add, waking, expiry and
-- trim (_merge.lua then holds the fast path's check and the planned settle
-- and merge that open_inbox runs).

-- >>> archive and snooze (ib.archived_key, ib.snoozed_key: park.lua's keys) >>>
-- A parked member (archived or snoozed) left all, its category zset and its
-- push bit (so it is in no count), keeps its expiry entry and read bit, and
-- its ref sits in the hidden set (no merge or fan-out rerun brings it back).

-- A removal (retraction, expiry) of a parked member: 1 if it was parked.
local function unpark_removed(ib, member)
  if not ib.archived_key then return 0 end
  local gone = call("ZREM", ib.archived_key, member) + call("ZREM", ib.snoozed_key, member)
  if gone == 0 then return 0 end
  call("ZREM", ib.expiry_key, member)
  touch(ib)
  return 1
end
-- <<< archive and snooze <<<

local function remove(ib, member)
  local ref, cat, month, off = parse(member)
  if not ref or not ib.category_keys[cat] then return 0 end
  local bit = read_bit(ib, month, off)
  if bit == nil then return 0 end
  if call("ZREM", ib.all_key, member) == 0 then return unpark_removed(ib, member) end
  call("ZREM", ib.arrivals_key, member)  -- (one not placed yet holds nothing else)
  call("ZREM", ib.category_keys[cat], member)
  call("ZREM", ib.expiry_key, member)
  bits_set(ib.forms, ib.push[month], off, 0)
  -- (unread zsets)
  if bit == 0 and unread_drop(ib, member, cat) == 1 then call("HINCRBY", ib.counters_key, cat, -1) end
  touch(ib)
  return 1
end

-- The merge's add: an item already expired stays out.
local function add(ib, member, time, expire)
  local ref, cat, month, off = parse(member)
  if not ref or not ib.category_keys[cat] or not ib.read[month] then return 0 end
  if expire > 0 and expire <= ib.now then return 0 end
  if not insert(ib, member, ref, cat, month, off, time, expire, expire > 0) then return 0 end
  touch(ib)
  return 1
end

-- >>> archive and snooze: snoozed members whose time has come are back,
-- unread, at their wake time (the bit was cleared when snoozed; again here
-- so a replayed snooze cannot leave it set) >>>
local function wake_due(ib, due)
  for i = 1, #due, 2 do
    local member, wake = due[i], due[i + 1]
    local ref, cat, month, off = parse(member)
    call("ZREM", ib.snoozed_key, member)
    if ref and ib.category_keys[cat] and ib.read[month] then
      call("SREM", ib.hidden_key, ref)
      bits_set(ib.forms, ib.read[month], off, 0)
      local expire = call("ZSCORE", ib.expiry_key, member)
      insert(ib, member, ref, cat, month, off, wake, expire or 0, expire and true or false)
      touch(ib)
    end
  end
end

local function wake_snoozed(ib)
  if not ib.snoozed_key then return end
  local first = call("ZRANGE", ib.snoozed_key, 0, 0, "WITHSCORES")
  if #first == 2 and tonumber(first[2]) <= ib.now then
    local n = take(ib, ib.step)
    if n > 0 then
      local due = call("ZRANGEBYSCORE", ib.snoozed_key, "-inf", ib.now, "WITHSCORES", "LIMIT", 0, n)
      ib.budget = ib.budget + (n - #due / 2)
      wake_due(ib, due)
      first = call("ZRANGE", ib.snoozed_key, 0, 0, "WITHSCORES")
    end
    if #first == 2 and tonumber(first[2]) <= ib.now then ib.more = true end
  end
  if #first == 2 then ib.next_wake = first[2] else ib.next_wake = "" end
end
-- <<< archive and snooze <<<

-- Expiry is exact: an item whose expire_at has come is gone from every view
-- (a step a call; ib.more: the caller calls again before it answers).
local function settle_expired(ib)
  settle_evicted(ib)  -- caps on write
  local first = call("ZRANGE", ib.expiry_key, 0, 0, "WITHSCORES")
  if #first == 2 and tonumber(first[2]) <= ib.now then
    local n = take(ib, ib.step)
    if n > 0 then
      local due = call("ZRANGEBYSCORE", ib.expiry_key, "-inf", ib.now, "LIMIT", 0, n)
      ib.budget = ib.budget + (n - #due)
      -- Live ones leave in a few commands; parked, stray or unknown ones one by one.
      local live, held = {}, {}
      if #due > 0 then held = call("ZMSCORE", ib.all_key, unpack(due)) end
      for i, member in ipairs(due) do
        if held[i] and removable(ib, member) then
          live[#live + 1] = member
        else
          local _, _, month = parse(member)  -- a stray entry goes (a month not passed keeps its own)
          if remove(ib, member) == 0 and (not month or ib.read[month]) then call("ZREM", ib.expiry_key, member) end
        end
      end
      remove_live(ib, live)
      first = call("ZRANGE", ib.expiry_key, 0, 0, "WITHSCORES")
    end
    if #first == 2 and tonumber(first[2]) <= ib.now then
      ib.more = true
      ib.expiry_left = true
    end
  end
  if #first == 2 then ib.next_expiry = first[2] else ib.next_expiry = "" end
  wake_snoozed(ib)  -- archive and snooze
end

-- The newest max_items stay, at most a step leaving a call (an inbox filled
-- before caps on write). Only once no expired member is left: counted in the
-- size, they would make it drop live items the cap keeps.
local function trim(ib, max_items)
  if ib.expiry_left then return end
  local extra = call("ZCARD", ib.all_key) - max_items
  if extra <= 0 then return end
  local n = take(ib, extra)
  if n < extra then ib.more = true end
  if n == 0 then return end
  local live = {}
  for _, member in ipairs(call("ZRANGE", ib.all_key, 0, n - 1)) do
    if removable(ib, member) then live[#live + 1] = member end  -- others are left alone, as remove() leaves them
  end
  remove_live(ib, live)
end
