-- The user deletes one item from the inbox (the shared inbox preambles
-- come first): its ref joins the hidden set, so no merge brings it back.
-- Returns 1 if it was live and is gone, else 0.

local member = ARGV[1]
if not open_inbox(0, 1, false) then return "STALE" end

if not present(member) then return 0 end
local ref = parse(member)
call("SADD", hidden_key, ref)
return remove(member)
