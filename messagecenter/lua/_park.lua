-- Shared by archive.lua, unarchive.lua, snooze.lua and bulk_mark.lua (after
-- the inbox preambles, whose _settle.lua declares the archived and snoozed
-- zsets): where a member is and how it leaves the list. The first three take
-- the same own ARGV: member, score (ms: its place in the archived list or in
-- the inbox, or its wake time), expiry (ms, 0 = never), as PostgreSQL says.

-- "live", "archived", "snoozed", or nil when the member is not in this inbox.
local function place(ib, member)
  if present(ib, member) then return "live" end
  if call("ZSCORE", ib.archived_key, member) then return "archived" end
  if call("ZSCORE", ib.snoozed_key, member) then return "snoozed" end
  return nil
end

-- A live member leaves the list and the counts; its read bit and expiry
-- entry stay, and its ref is hidden so no merge brings it back meanwhile.
local function park(ib, member)
  local ref, cat, month, off = parse(member)
  call("ZREM", ib.all_key, member)
  call("ZREM", ib.category_keys[cat], member)
  bits_set(ib.forms, ib.push[month], off, 0)
  -- (unread zsets: only a member counted unread, one in them, is uncounted)
  if bits_get(ib.forms, ib.read[month], off) == 0 and unread_drop(ib, member, cat) == 1 then
    call("HINCRBY", ib.counters_key, cat, -1)
  end
  call("SADD", ib.hidden_key, ref)
  touch(ib)
end

-- A member not merged yet (a rebuild, or a pull item or bulletin this inbox
-- has not read since) is parked directly; false when it has expired.
local function park_unmerged(ib, member, expire)
  local ref, cat, month = parse(member)
  if not ib.category_keys[cat] or not ib.read[month] then return false end
  if expire > 0 and expire <= ib.now then return false end
  call("SADD", ib.months_key, month)
  call("SADD", ib.hidden_key, ref)
  if expire > 0 then call("ZADD", ib.expiry_key, expire, member) end
  touch(ib)
  return true
end

-- Take the member out of wherever it is (live or parked) and park it; false
-- when it is not (and cannot be) in this inbox.
local function park_anywhere(ib, member, expire)
  local where = place(ib, member)
  if where == "live" then park(ib, member)
  elseif where == "archived" then call("ZREM", ib.archived_key, member)
  elseif where == "snoozed" then call("ZREM", ib.snoozed_key, member)
  elseif not park_unmerged(ib, member, expire) then return false end
  return true
end
