-- One item of the user's inbox (the shared inbox preambles come first):
-- {time, read bit, place} if the member is live ("live") or parked there
-- ("archived", "snoozed": time is its archived place or wake time), else false.

local member = ARGV[1]
if not open_inbox(0, 1, false) then return NOT_OPEN end

local _, _, month, off = parse(member)
if present(member) then return {call("ZSCORE", all_key, member), read_bit(month, off), "live"} end
-- Parked items (archive and snooze) answer with their place too.
local archived = call("ZSCORE", archived_key, member)
if archived and READ[month] then return {archived, read_bit(month, off), "archived"} end
local wake = call("ZSCORE", snoozed_key, member)
if wake and READ[month] then return {wake, read_bit(month, off), "snoozed"} end
return false
