-- Group membership changed (the shared inbox preambles come first): drop
-- the items of one kind (bulletins, ARGV[1] their ref prefix) and forget the
-- merge marker, so the next read merges what is visible now. The members in
-- ARGV[2] (comma-separated, of that kind, archived or snoozed as
-- PostgreSQL's rows say) leave their parked zsets too: the rows bound the
-- work, where a scan of the archived zset would grow with the user's
-- history. Their refs stay hidden, so no merge lists them before the
-- projection puts back those the user's groups still show. Read bits live
-- in the bitmaps and survive. Returns how many items left.

local prefix, parked = ARGV[1], ARGV[2]
local ib = open_inbox(0, 2, false)
if ib.not_open then return ib.not_open end

local function ours(member) return string.sub(member, 1, #prefix) == prefix end

local dropped = 0
for _, member in ipairs(call("ZRANGE", ib.all_key, 0, -1)) do
  if ours(member) then dropped = dropped + remove(ib, member) end
end
for member in string.gmatch(parked, "[^,]+") do
  if ours(member) then dropped = dropped + unpark_removed(ib, member) end
end
call("DEL", ib.access_key)
call("HDEL", ib.state_key, "bd")  -- the bulletin display marker: no bulletin merged any more
return dropped
