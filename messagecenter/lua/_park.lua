-- Shared by archive.lua, unarchive.lua, snooze.lua and bulk_mark.lua (after
-- the inbox preambles, whose _settle.lua declares the archived and snoozed
-- zsets): where a member is and how it leaves the list. The first three take
-- the same own ARGV: member, score (ms: its place in the archived list or in
-- the inbox, or its wake time), expiry (ms, 0 = never), as PostgreSQL says.

-- "live", "archived", "snoozed", or nil when the member is not in this inbox.
local function place(member)
  if present(member) then return "live" end
  if call("ZSCORE", archived_key, member) then return "archived" end
  if call("ZSCORE", snoozed_key, member) then return "snoozed" end
  return nil
end

-- A live member leaves the list and the counts; its read bit and expiry
-- entry stay, and its ref is hidden so no merge brings it back meanwhile.
local function park(member)
  local ref, cat, month, off = parse(member)
  call("ZREM", all_key, member)
  call("ZREM", category_keys[cat], member)
  bits_set(PUSH[month], off, 0)
  -- (unread zsets: only a member counted unread, one in them, is uncounted)
  if bits_get(READ[month], off) == 0 and unread_drop(member, cat) == 1 then
    call("HINCRBY", counters_key, cat, -1)
  end
  call("SADD", hidden_key, ref)
  touch()
end

-- A member not merged yet (a rebuild, or a pull item or bulletin this inbox
-- has not read since) is parked directly; false when it has expired.
local function park_unmerged(member, expire)
  local ref, cat, month = parse(member)
  if not category_keys[cat] or not READ[month] then return false end
  if expire > 0 and expire <= NOW then return false end
  call("SADD", months_key, month)
  call("SADD", hidden_key, ref)
  if expire > 0 then call("ZADD", expiry_key, expire, member) end
  touch()
  return true
end

-- Take the member out of wherever it is (live or parked) and park it; false
-- when it is not (and cannot be) in this inbox.
local function park_anywhere(member, expire)
  local where = place(member)
  if where == "live" then park(member)
  elseif where == "archived" then call("ZREM", archived_key, member)
  elseif where == "snoozed" then call("ZREM", snoozed_key, member)
  elseif not park_unmerged(member, expire) then return false end
  return true
end
