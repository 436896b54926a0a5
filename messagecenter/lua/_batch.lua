-- Shared by the per-user inbox scripts (after _item.lua and _state.lua,
-- before _steps.lua and _settle.lua): settling many members in a few
-- commands (one per category or month, each naming many members) instead of
-- several commands per member (their bits many at a time, _bits_many.lua).
-- A step holds at most ib.step members and ib.step is capped
-- (inbox.SETTLE_STEP_MAX), so the variadic commands' arguments stay within
-- what Lua can unpack.

-- Members grouped by a part of their layout: part(ref, cat, month, off)
-- names the group (nil: the member is left out); name -> list of members.
local function group(members, part)
  local groups = {}
  for _, member in ipairs(members) do
    local ref, cat, month, off = parse(member)
    local name = ref and part(ref, cat, month, off)
    if name then
      local list = groups[name]
      if not list then
        list = {}
        groups[name] = list
      end
      list[#list + 1] = member
    end
  end
  return groups
end

-- The part that groups by category (members of a category this inbox lacks left out).
local function category_of(ib)
  return function(_, cat) return ib.category_keys[cat] and cat end
end

-- The offsets of these members (one month's), in order.
local function offsets(members)
  local offs = {}
  for i, member in ipairs(members) do
    local _, _, _, off = parse(member)
    offs[i] = off
  end
  return offs
end

-- The rest of the removal of members that left all (trimmed, expired, or
-- evicted by a fan-out): each leaves its category zset and the unread zsets,
-- uncounted by those (they hold exactly the counted members: no read bit is
-- read), its push bit goes to 0 (a month whose bitmaps were not passed keeps
-- it) and its expiry entry goes. `evicted`: only members still in their
-- category zset (one removed otherwise since is done), and a parked member
-- (its ref hidden) keeps its expiry entry.
local function drop_rest(ib, members, evicted)
  local done = {}
  for cat, list in pairs(group(members, category_of(ib))) do
    if evicted then
      local held, kept = call("ZMSCORE", ib.category_keys[cat], unpack(list)), {}
      for i, member in ipairs(list) do
        if held[i] then kept[#kept + 1] = member end
      end
      list = kept
    end
    if #list > 0 then
      call("ZREM", ib.category_keys[cat], unpack(list))
      local unread = call("ZREM", ib.unread_keys[cat], unpack(list))
      if unread > 0 then call("HINCRBY", ib.counters_key, cat, -unread) end
      for _, member in ipairs(list) do done[#done + 1] = member end
    end
  end
  if #done == 0 then return end
  call("ZREM", ib.unread_all_key, unpack(done))
  for month, list in pairs(group(done, function(_, _, m) return ib.push[m] and m end)) do
    bits_clear_many(ib.forms, ib.push[month], offsets(list))
  end
  local unexpired = done
  if evicted then
    local refs = {}
    for i, member in ipairs(done) do refs[i] = parse(member) end
    local hidden = call("SMISMEMBER", ib.hidden_key, unpack(refs))
    unexpired = {}
    for i, member in ipairs(done) do
      if hidden[i] == 0 then unexpired[#unexpired + 1] = member end
    end
  end
  if #unexpired > 0 then call("ZREM", ib.expiry_key, unpack(unexpired)) end
  touch(ib)
end

-- Can this call remove the member whole (remove() would not leave it alone)?
local function removable(ib, member)
  local ref, cat, month = parse(member)
  return ref ~= nil and ib.category_keys[cat] ~= nil and ib.read[month] ~= nil
end

-- Live members (in all, each removable) leave the inbox whole: what
-- remove() (_settle.lua) does to one, for many at once.
local function remove_live(ib, members)
  if #members == 0 then return end
  call("ZREM", ib.all_key, unpack(members))
  call("ZREM", ib.arrivals_key, unpack(members))
  drop_rest(ib, members, false)
end
