-- The user archives one item (the inbox preambles and _park.lua come first):
-- it leaves the list and every count and joins the archived zset at its
-- place in the list (a snoozed item is archived instead, at its own time).
-- Returns 1 if the item is archived now, 0 if it is not in this inbox.

local member, score, expire = ARGV[1], ARGV[2], tonumber(ARGV[3])
local ib = open_inbox(0, 3, false)
if ib.not_open then return ib.not_open end

if tonumber(call("ZSCORE", ib.archived_key, member) or "-1") == tonumber(score) then return 1 end
if not park_anywhere(ib, member, expire) then return 0 end
call("ZADD", ib.archived_key, score, member)
touch(ib)
return 1
