-- Group membership changed (the shared inbox preambles come first): drop
-- the items of one kind (bulletins, ARGV[1] their ref prefix) and forget the
-- merge marker, so the next read merges what is visible now. Archived and
-- snoozed ones leave their zsets too; their refs stay hidden, so no merge
-- lists them before the projection puts back, from PostgreSQL's rows, those
-- the user's groups still show. Read bits live in the bitmaps and survive.
-- Returns how many items left.

local prefix = ARGV[1]
if not open_inbox(0, 1, false) then return NOT_OPEN end

local function ours(member) return string.sub(member, 1, #prefix) == prefix end

local dropped = 0
for _, member in ipairs(call("ZRANGE", all_key, 0, -1)) do
  if ours(member) then dropped = dropped + remove(member) end
end
for _, member in ipairs(call("ZRANGE", archived_key, 0, -1)) do
  if ours(member) then dropped = dropped + unpark_removed(member) end
end
for _, member in ipairs(call("ZRANGE", snoozed_key, 0, -1)) do
  if ours(member) then dropped = dropped + unpark_removed(member) end
end
call("DEL", access_key)
call("HDEL", state_key, "bd")  -- the bulletin display marker: no bulletin merged any more
return dropped
