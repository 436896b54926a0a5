-- The user snoozes one item until `score` (its wake time, ms; the inbox
-- preambles and _park.lua come first): it leaves the list and every count
-- (an archived one leaves the archive) and its read bit is cleared, so the
-- settle step (_settle.lua wake_snoozed) brings it back unread at that time.
-- Returns 1 if the item is snoozed now, 0 if it is not in this inbox.

local member, wake, expire = ARGV[1], ARGV[2], tonumber(ARGV[3])
local ib = open_inbox(0, 3, false)
if ib.not_open then return ib.not_open end

if not park_anywhere(ib, member, expire) then return 0 end
local _, _, month, off = parse(member)
bits_set(ib.forms, ib.read[month], off, 0)
call("ZADD", ib.snoozed_key, wake, member)
touch(ib)
return 1
