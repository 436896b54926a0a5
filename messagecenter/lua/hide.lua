-- The user deletes one item from the inbox (the shared inbox preambles
-- come first): its ref joins the hidden set, so no merge brings it back.
-- Returns 1 if it was live and is gone, else 0.

local member = ARGV[1]
local ib = open_inbox(0, 1, false)
if ib.not_open then return ib.not_open end

local ref = parse(member)
if not present(ib, member) then
  -- A parked item (archive and snooze) is deleted from its zset; its ref stays hidden.
  if unpark_removed(ib, member) == 0 then return 0 end
  call("SADD", ib.hidden_key, ref)
  return 1
end
call("SADD", ib.hidden_key, ref)
return remove(ib, member)
