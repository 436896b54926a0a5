-- A user's fill: many items (none grouped) into one inbox in one call, each
-- placed at once (the shared inbox preambles come first; the fill restored
-- the read state before, so each item lands read or unread as PostgreSQL
-- says, and the user's first read has no arrivals to place).
--
-- Own KEYS: 12 the user's notification zset (the expiry sweep's index),
-- 13 the live version. Own ARGV: 1 the most items an inbox keeps (0 = no
-- cap), 2 the items, a line each: "<member> <time ms> <expire ms, 0 = never>
-- <1 for a notification, else 0>". The months passed are the items' months.
-- Returns how many items the inbox gained.
--
-- An item is inserted (all, its category zset, its push bit, the unread
-- zsets and counter when unread, the expiry zset, the months set) unless it
-- expired, is hidden or is there already. The cap is kept at the end of the
-- call by the settling's trim: the oldest leave whole (one of a month this
-- call did not pass waits for the next read's trim, which passes them all).
-- The version moves once; nobody is told (the user is the one reading).

local notifications_key, version_key = KEYS[12], KEYS[13]
local cap, items = tonumber(ARGV[1]), ARGV[2]
local ib = open_inbox(2, 2, false)
if ib.not_open then return ib.not_open end

-- The items still live, then those neither hidden nor there already: a few
-- variadic commands for the whole call; place_many puts them in their places.
local live, refs = {}, {}
for member, time, expire_ms, notification in string.gmatch(items, "(%S+) (%d+) (%d+) ([01])\n") do
  local expire = tonumber(expire_ms)
  if notification == "1" then call("ZADD", notifications_key, "NX", expire_ms, member) end
  local ref, cat, month, off = parse(member)
  if (expire == 0 or expire > ib.now) and ref and ib.category_keys[cat] and ib.read[month] then
    live[#live + 1] = {member, cat, month, off, time, expire_ms}
    refs[#refs + 1] = ref
  end
end
local placing, scored, expiring, months = {}, {}, {}, {}
if #live > 0 then
  local hidden = call("SMISMEMBER", ib.hidden_key, unpack(refs))
  local members = {}
  for i, item in ipairs(live) do members[i] = item[1] end
  local held = call("ZMSCORE", ib.all_key, unpack(members))
  for i, item in ipairs(live) do
    if hidden[i] == 0 and not held[i] then
      placing[#placing + 1] = item
      scored[#scored + 1] = item[5]
      scored[#scored + 1] = item[1]
      if item[6] ~= "0" then
        expiring[#expiring + 1] = item[6]
        expiring[#expiring + 1] = item[1]
      end
      months[item[3]] = true
    end
  end
end
local gained = #placing
if gained > 0 then
  call("ZADD", ib.all_key, unpack(scored))
  if #expiring > 0 then call("ZADD", ib.expiry_key, unpack(expiring)) end
  for month in pairs(months) do call("SADD", ib.months_key, month) end
  place_many(ib, placing)
end

-- The cap: the oldest leave whole, as a read's settling trims them (_settle.lua).
if cap > 0 then trim(ib, cap) end
if gained > 0 then
  touch(ib)
  call("INCR", version_key)
end
return gained
