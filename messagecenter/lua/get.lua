-- One item of the user's inbox (the shared inbox preambles come first):
-- {time, read bit} if the member is live there, else false.

local member = ARGV[1]
if not open_inbox(0, 1, false) then return "STALE" end

if not present(member) then return false end
local _, _, month, off = parse(member)
return {call("ZSCORE", all_key, member), read_bit(month, off)}
