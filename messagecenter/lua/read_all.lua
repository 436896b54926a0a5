-- Every live unread item of the category (or all) becomes read, in one step
-- (the shared inbox preambles come first; the ever-read bitmaps are
-- passed). An optional upper bound on the time axis (time_max, "" = none)
-- limits it to items that existed when the user asked: a "read all" accepted
-- while Redis was down and replayed later must not swallow items that
-- arrived meanwhile. `hour` is the hour bucket the first reads count in.
-- First reads (read bit 0 -> 1 while the ever-read bit was 0) are counted
-- per item by the caller (the per-item counters are global keys): they come
-- back as {marked, first refs, {month, first-read bitmap, ...}} (a sparse
-- month: "#<month>", its offsets joined by ","). On the fast
-- path the script queues them itself on the pending list (a global key of
-- the fast path), in reads.py's entry formats, and returns {marked, {}, {}}.

local scratch_key = KEYS[12]
local category, time_max, hour = ARGV[1], ARGV[2], ARGV[3]
local ib = open_inbox(1, 3, true)
if ib.not_open then return ib.not_open end

if time_max == "" then time_max = "+inf" end
local marked, first, first_maps = 0, {}, {}
-- The bound leaves something out only when an unread item is newer than it
-- (the unread zset holds exactly the unread items): without one, "every
-- unread item up to the bound" is every unread item, and the bit operations
-- below do it in a few commands a month instead of a walk over each item.
local everything = category == "" and (time_max == "+inf"
  or #call("ZRANGEBYSCORE", ib.unread_all_key, "(" .. time_max, "+inf", "LIMIT", 0, 1) == 0)
if everything then
  -- Everything: a month's push bits are the month's present items, so the
  -- read bits become read OR push, with bit operations instead of a walk over
  -- every item (10,000 items cost a few BITOPs per month; a sparse month's set
  -- form, _bits.lua, at most 512 adds). The counters say
  -- how many were unread; all of them are 0 afterwards.
  for _, v in ipairs(call("HVALS", ib.counters_key)) do
    local count = tonumber(v)
    if count > 0 then marked = marked + count end
  end
  for _, month in ipairs(ib.months) do
    local read_key, push_key, ever_key = ib.read[month], ib.push[month], ib.ever[month]
    local pushed = bits_members(ib.forms, push_key)
    if pushed then
      -- A sparse month (_bits.lua: a set of at most 512 offsets): first reads
      -- are its offsets whose ever-read bit is 0, handed back as "#<month>"
      -- and the offsets joined by "," (reads.py reads both forms).
      local fresh = {}
      for _, o in ipairs(pushed) do
        if bits_get(ib.forms, ever_key, o) == 0 then fresh[#fresh + 1] = o end
      end
      if #fresh > 0 then
        first_maps[#first_maps + 1] = "#" .. month
        first_maps[#first_maps + 1] = table.concat(fresh, ",")
      end
    else
      -- first reads = push AND NOT ever = push XOR (push AND ever), on bitmaps
      bits_to_bitmap(ib.forms, ever_key)
      call("BITOP", "AND", scratch_key, push_key, ever_key)
      call("BITOP", "XOR", scratch_key, scratch_key, push_key)
      if call("BITCOUNT", scratch_key) > 0 then
        first_maps[#first_maps + 1] = month
        first_maps[#first_maps + 1] = call("GET", scratch_key)
      end
    end
    bits_or(ib.forms, read_key, push_key)
    bits_or(ib.forms, ever_key, push_key)
  end
  call("DEL", scratch_key, ib.counters_key)
  -- Nothing is unread any more: the unread zsets go too (UNLINK: freed off
  -- the main thread, so a large one costs this call nothing).
  call("UNLINK", ib.unread_all_key)
  for _, cat in ipairs(CATEGORIES) do call("UNLINK", ib.unread_keys[cat]) end
  if marked > 0 then touch(ib) end
else
  -- Only unread members change, and the unread zset holds exactly those: the
  -- walk costs the unread items, not the whole list.
  local key = ib.unread_all_key
  if category ~= "" then key = ib.unread_keys[category] end
  local by_cat = {}
  for _, member in ipairs(call("ZRANGEBYSCORE", key, "-inf", time_max)) do
    local ref, item_category, month, off = parse(member)
    if ib.read[month] and bits_set(ib.forms, ib.read[month], off, 1) == 0 then
      marked = marked + 1
      by_cat[item_category] = (by_cat[item_category] or 0) + 1
      if first_read(ib, month, off) then first[#first + 1] = ref end
    end
    if ib.read[month] then unread_drop(ib, member, item_category) end
  end
  -- One counter write per category, not one per item.
  for unread_category, count in pairs(by_cat) do call("HINCRBY", ib.counters_key, unread_category, -count) end
  if marked > 0 then touch(ib) end
end
if ib.fast then
  if #first > 0 then call("RPUSH", ib.pending_key, hour .. "|" .. table.concat(first, ",")) end
  for i = 1, #first_maps, 2 do
    call("RPUSH", ib.pending_key, hour .. "|@" .. first_maps[i] .. "|" .. first_maps[i + 1])
  end
  return {marked, {}, {}}
end
return {marked, first, first_maps}
