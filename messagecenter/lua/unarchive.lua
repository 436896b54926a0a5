-- An archived (or snoozed) item goes back to the list as it was: at `score`,
-- with its read bit (the inbox preambles and _park.lua come first). The
-- projection runs it whenever PostgreSQL says the item is in the list.
-- Returns 1 if the item is in the list now, 0 if it is not in this inbox.

local member, score, expire = ARGV[1], ARGV[2], tonumber(ARGV[3])
if not open_inbox(0, 3, false) then return NOT_OPEN end

local where = place(member)
if where == "live" then return 1 end
local ref, cat, month, off = parse(member)
if where == nil then
  -- Not merged yet (a rebuild; a pull item or bulletin not read since): in
  -- now at its place, as the merge would (NX; a deleted ref stays out).
  if not category_keys[cat] or not READ[month] or (expire > 0 and expire <= NOW) then return 0 end
  if not insert(member, ref, cat, month, off, score, expire, expire > 0) then return 0 end
  touch()
  return 1
end
if where == "archived" then call("ZREM", archived_key, member) else call("ZREM", snoozed_key, member) end
call("SREM", hidden_key, ref)
if expire > 0 and expire <= NOW then
  call("ZREM", expiry_key, member)
  touch()
  return 0
end
insert(member, ref, cat, month, off, score, expire, expire > 0)
touch()
return 1
