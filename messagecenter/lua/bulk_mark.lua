-- Mark many items read ("1") or unread ("0") in one call (the inbox
-- preambles and _park.lua come first; the ever-read bitmaps are passed):
-- mark.lua's rule per member. Live and archived items are marked (an
-- archived one keeps its flag for when it comes back, and is in no count);
-- snoozed ones and members not in this inbox are skipped.
-- ARGV: want, the members joined by "," (a member holds none). Returns
-- {marked, refs read for the first time}.

local want, listed = tonumber(ARGV[1]), ARGV[2]
local ib = open_inbox(0, 2, true)
if ib.not_open then return ib.not_open end

local done, first = 0, {}
for member in string.gmatch(listed, "[^,]+") do
  local where = place(ib, member)
  if where == "live" or where == "archived" then
    local ref, cat, month, off = parse(member)
    local old = bits_set(ib.forms, ib.read[month], off, want)
    if old ~= want then
      touch(ib)
      if where == "live" then
        call("HINCRBY", ib.counters_key, cat, want == 1 and -1 or 1)
        if want == 1 then unread_drop(ib, member, cat)
        else unread_add(ib, member, cat, call("ZSCORE", ib.all_key, member)) end
      end
    end
    if want == 1 and old == 0 and first_read(ib, month, off) then first[#first + 1] = ref end
    done = done + 1
  end
end
return {done, first}
