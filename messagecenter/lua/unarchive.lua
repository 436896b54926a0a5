-- An archived (or snoozed) item goes back to the list as it was: at `score`,
-- with its read bit (the inbox preambles and _park.lua come first). The
-- projection runs it whenever PostgreSQL says the item is in the list; one
-- in the list at another score moves to `score`. A bulletin whose display
-- time is still ahead (an edit moved it) is only freed: the merge lists it
-- when that time comes.
-- Returns 1 if the item is in the list now, 0 if it is not in this inbox.

local member, score, expire = ARGV[1], ARGV[2], tonumber(ARGV[3])
local ib = open_inbox(0, 3, false)
if ib.not_open then return ib.not_open end

local where = place(ib, member)
local ref, cat, month, off = parse(member)
if where == "live" then
  -- In the list already, maybe elsewhere: a rebuild delivers and merges
  -- every item at its own time before it places them, while a snooze that
  -- has woken puts the item at its wake time. PostgreSQL's score wins; an
  -- unread member joins the unread zsets at it (counted only if it was not
  -- there: an unread index still being walked may not have reached it).
  if tonumber(call("ZSCORE", ib.all_key, member)) == tonumber(score) then return 1 end
  call("ZADD", ib.all_key, score, member)
  call("ZADD", ib.category_keys[cat], score, member)
  if bits_get(ib.forms, ib.read[month], off) == 0 then
    if not call("ZSCORE", ib.unread_keys[cat], member) then call("HINCRBY", ib.counters_key, cat, 1) end
    unread_add(ib, member, cat, score)
  end
  touch(ib)
  return 1
end
if where == nil then
  -- Not merged yet (a rebuild; a pull item or bulletin not read since; a
  -- bulletin whose parked place an edit or a membership change dropped):
  -- in now at its place, as the merge would. Its ref may still be hidden
  -- from that parking; the projection only calls this for an item the user
  -- has not deleted, so the ref is free again. A bulletin not displayed yet
  -- waits for the merge at its display time.
  if not ib.category_keys[cat] or not ib.read[month] or (expire > 0 and expire <= ib.now) then return 0 end
  if call("SREM", ib.hidden_key, ref) == 1 then touch(ib) end
  if tonumber(score) > ib.now then return 0 end
  if not insert(ib, member, ref, cat, month, off, score, expire, expire > 0) then return 0 end
  touch(ib)
  return 1
end
if where == "archived" then call("ZREM", ib.archived_key, member) else call("ZREM", ib.snoozed_key, member) end
call("SREM", ib.hidden_key, ref)
if (expire > 0 and expire <= ib.now) or tonumber(score) > ib.now then
  call("ZREM", ib.expiry_key, member)
  touch(ib)
  return 0
end
insert(ib, member, ref, cat, month, off, score, expire, expire > 0)
touch(ib)
return 1
