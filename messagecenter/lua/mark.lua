-- Mark one item read ("1") or unread ("0") (the shared inbox preambles
-- come first; the ever-read bitmaps are passed). Returns 0 if the item is
-- not in the inbox (or snoozed), 2 for the user's first read of it (the
-- caller counts it: the per-item counter is a global key, so it is not
-- touched here), else 1. On the fast path the script queues that first read
-- itself on the pending list (a global key of the fast path), in reads.py's
-- entry format for the hour bucket `hour`, and returns 1: the caller has
-- nothing left to send.

local member, want, hour = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local ib = open_inbox(0, 3, true)
if ib.not_open then return ib.not_open end

local live = present(ib, member)
-- An archived item keeps its flag (it is in no count); a snoozed one is away.
if not live and not call("ZSCORE", ib.archived_key, member) then return 0 end
local _, cat, month, off = parse(member)
if not ib.read[month] then return 0 end
local old = bits_set(ib.forms, ib.read[month], off, want)
if old ~= want then
  touch(ib)
  if live then
    call("HINCRBY", ib.counters_key, cat, want == 1 and -1 or 1)
    if want == 1 then unread_drop(ib, member, cat)
    else unread_add(ib, member, cat, call("ZSCORE", ib.all_key, member)) end
  end
end
if want == 1 and old == 0 and first_read(ib, month, off) then
  if not ib.fast then return 2 end
  call("RPUSH", ib.pending_key, hour .. "|" .. parse(member))
end
return 1
