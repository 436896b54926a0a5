-- One item of the user's inbox (the shared inbox preambles come first):
-- {time, read bit, place, detail} if the member is live ("live") or parked
-- there ("archived", "snoozed": time is its archived place or wake time),
-- else false. ARGV: the member, or on the fast path "" and the item's ref:
-- the script then reads the item's detail (a global key of the fast path)
-- and takes the member from it, so a lookup by ref costs one round trip;
-- the detail comes back with the answer (false when the member was given).

local member, ref = ARGV[1], ARGV[2]
local ib = open_inbox(0, 2, false)
if ib.not_open then return ib.not_open end

local detail = false
if member == "" then
  detail = call("HGET", ib.detail_key, ref)
  if not detail then return false end
  -- Decoded, not matched: a notification's own data may hold a "member" key.
  member = cjson.decode(detail).member
  if type(member) ~= "string" then return false end
end
local _, _, month, off = parse(member)
if present(ib, member) then return {call("ZSCORE", ib.all_key, member), read_bit(ib, month, off), "live", detail} end
-- Parked items (archive and snooze) answer with their place too.
local archived = call("ZSCORE", ib.archived_key, member)
if archived and ib.read[month] then return {archived, read_bit(ib, month, off), "archived", detail} end
local wake = call("ZSCORE", ib.snoozed_key, member)
if wake and ib.read[month] then return {wake, read_bit(ib, month, off), "snoozed", detail} end
return false
