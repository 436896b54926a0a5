-- An archived (or snoozed) item goes back to the list as it was: at `score`,
-- with its read bit (the inbox preambles and _park.lua come first). The
-- projection runs it whenever PostgreSQL says the item is in the list.
-- Returns 1 if the item is in the list now, 0 if it is not in this inbox.

local member, score, expire = ARGV[1], ARGV[2], tonumber(ARGV[3])
if not open_inbox(0, 3, false) then return "STALE" end

local where = place(member)
if where == "live" then return 1 end
if where == nil then return 0 end
if where == "archived" then call("ZREM", archived_key, member) else call("ZREM", snoozed_key, member) end
local ref, cat, month, off = parse(member)
call("SREM", hidden_key, ref)
if expire > 0 and expire <= NOW then
  call("ZREM", expiry_key, member)
  touch()
  return 0
end
insert(member, ref, cat, month, off, score, expire, expire > 0)
touch()
return 1
