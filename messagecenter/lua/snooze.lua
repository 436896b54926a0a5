-- The user snoozes one item until `score` (its wake time, ms; the inbox
-- preambles and _park.lua come first): it leaves the list and every count
-- (an archived one leaves the archive) and its read bit is cleared, so the
-- settle step (_settle.lua wake_snoozed) brings it back unread at that time.
-- Returns 1 if the item is snoozed now, 0 if it is not in this inbox.

local member, wake, expire = ARGV[1], ARGV[2], tonumber(ARGV[3])
if not open_inbox(0, 3, false) then return NOT_OPEN end

if not park_anywhere(member, expire) then return 0 end
local _, _, month, off = parse(member)
bits_set(READ[month], off, 0)
call("ZADD", snoozed_key, wake, member)
touch()
return 1
