-- The user archives one item (the inbox preambles and _park.lua come first):
-- it leaves the list and every count and joins the archived zset at its
-- place in the list (a snoozed item is archived instead, at its own time).
-- Returns 1 if the item is archived now, 0 if it is not in this inbox.

local member, score, expire = ARGV[1], ARGV[2], tonumber(ARGV[3])
if not open_inbox(0, 3, false) then return NOT_OPEN end

if tonumber(call("ZSCORE", archived_key, member) or "-1") == tonumber(score) then return 1 end
if not park_anywhere(member, expire) then return 0 end
call("ZADD", archived_key, score, member)
touch()
return 1
