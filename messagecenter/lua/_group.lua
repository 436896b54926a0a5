-- Grouped items (preamble of deliver.lua and group_merge.lua): one
-- recipient's groups of a key, kept in keys of the recipient's hash tag:
--   groups hash   ref of a group's row -> its JSON {key, count, seen, start, exp}
--                 (seen: the newest three distinct actors, {actor, time, member}
--                 each; exp: the earliest expiry among its items, absent when
--                 none expires)
--   open hash     group key -> the member of its open group's row
--   closed hash   "<end>|<row ref then>|<group key>" ("<end>|<group key>" for
--                 a bare end) -> the member of an ended group's row
--   members zset  the items of the key in this inbox (score = the item's time)
--   ends zset     the times the key's groups ended at (the row's time then),
--                 member "<end>|<ref of the row then>|" (a bare "<end>" from
--                 before rows were kept)
-- Items are ordered by time, then as the list orders equal times (by
-- member, bytewise): "newest" below means last in that order. The ends cut
-- the key's items into groups: an item belongs to the group of the first
-- end not older than it (an item at exactly an end's time and sorting after
-- that end's row is past it), or to the open group past the last end; a
-- group's row is its newest item. PostgreSQL keeps the ends (InboxGroupEnd)
-- and messagecenter/fallback.py decides the same way, so replaying the items
-- in any order (a rebuild) gives the same groups. A few commands per
-- recipient whatever the group's size: the row's JSON carries the count and
-- the (at most three) actors, so nothing walks a group on delivery or on a page.
local GROUP_ACTORS = 3

local function group_ref(member)
  return string.match(member, "^[^|]+")
end

-- Does ref a sort after ref b (both followed by "|", as in their members)?
-- Bytewise, as a sorted set orders equal scores: Lua's own string comparison
-- follows the server's collation locale.
local function group_sorts_after(a, b)
  a, b = a .. "|", b .. "|"
  for i = 1, math.min(#a, #b) do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x > y end
  end
  return #a > #b
end

-- Is the item (member at score) newer than the row head at head_score?
local function group_newer(score, member, head_score, head)
  if tonumber(score) ~= tonumber(head_score) then return tonumber(score) > tonumber(head_score) end
  return group_sorts_after(group_ref(member), group_ref(head))
end

-- The newest three distinct actors, each kept with the time and member of
-- its newest item (meta.seen: {actor, time, member} each, newest first), so
-- an item that joins out of order (a merge on read brings an older item after
-- newer ones) takes its place by time, as PostgreSQL orders them. Readers take
-- the names from it (readmodel.grouping). A group written before the times
-- were kept has only meta.actors, names without times ("+inf"): they stay
-- ahead of every item that joins later, and the names go into meta.seen.
local function group_seen_newer(score, member, entry)
  if entry[2] == "+inf" then return false end
  return group_newer(score, member, entry[2], entry[3])
end

local function group_seen_add(meta, actor, score, member)
  if actor == "" then return end
  local seen = meta.seen
  if type(seen) ~= "table" then
    seen = {}
    if type(meta.actors) == "table" then
      for i, name in ipairs(meta.actors) do seen[i] = {name, "+inf", ""} end
    end
  end
  local others = {}
  for _, entry in ipairs(seen) do
    if entry[1] ~= actor then
      others[#others + 1] = entry
    elseif not group_seen_newer(score, member, entry) then
      return  -- the actor is there with a newer item already
    end
  end
  local new, out = {actor, score, member}, {}
  for _, entry in ipairs(others) do
    if new and group_seen_newer(score, member, entry) then
      out[#out + 1] = new
      new = nil
    end
    out[#out + 1] = entry
  end
  if new then out[#out + 1] = new end
  for i = #out, GROUP_ACTORS + 1, -1 do out[i] = nil end
  meta.seen, meta.actors = out, nil
end

-- The group's earliest expiry: once passed, its count and actors are stale,
-- and a read that meets it has the user filled again from PostgreSQL (page.lua).
local function group_expiry_add(meta, expire)
  if expire > 0 and (meta.exp == nil or expire < meta.exp) then meta.exp = expire end
end

-- The item joins its group (or starts one); expire is its expiry (ms, 0 =
-- never). Returns the member that leaves the list: the old row when the new
-- item is newer, the new item itself when it is older than the row, nil when
-- it is the row.
local function group_join(groups_key, open_key, members_key, ends_key, closed_key, gkey, member, score, actor, expire)
  -- The hash and field that hold the row of the group an item at this time belongs to.
  local slot_key, field = open_key, gkey
  -- Groups that ended at the item's own time first (their members sort as
  -- their rows do), then the first later end.
  local ends = redis.call("ZRANGEBYSCORE", ends_key, score, score)
  local later = redis.call("ZRANGEBYSCORE", ends_key, "(" .. score, "+inf", "LIMIT", 0, 1)
  if #later == 1 then ends[#ends + 1] = later[1] end
  for _, found in ipairs(ends) do
    local until_time, row = string.match(found, "^([^|]+)|?([^|]*)")
    if tonumber(until_time) > tonumber(score) or row == "" or not group_sorts_after(group_ref(member), row) then
      slot_key, field = closed_key, until_time .. "|" .. (row ~= "" and row .. "|" or "") .. gkey
      break
    end
  end
  local head = redis.call("HGET", slot_key, field)
  if redis.call("ZADD", members_key, "NX", score, member) == 0 then
    -- Joined already: a rerun of the delivery (or a repair's) found it out of
    -- the list, where a newer item of its group put it: it stays out.
    if head == member then return nil end
    return member
  end
  local meta = nil
  if head then
    local raw = redis.call("HGET", groups_key, group_ref(head))
    if raw then meta = cjson.decode(raw) end
  end
  if not meta then
    meta = {key = gkey, count = 1, seen = {}, start = tonumber(score)}
    group_seen_add(meta, actor, score, member)
    group_expiry_add(meta, expire)
    redis.call("HSET", slot_key, field, member)
    redis.call("HSET", groups_key, group_ref(member), cjson.encode(meta))
    return nil
  end
  meta.count = meta.count + 1
  if tonumber(score) < meta.start then meta.start = tonumber(score) end
  group_seen_add(meta, actor, score, member)
  group_expiry_add(meta, expire)
  local head_score = redis.call("ZSCORE", members_key, head)
  if head_score and not group_newer(score, member, head_score, head) then
    -- Older than the row: it counts, the row stays.
    redis.call("HSET", groups_key, group_ref(head), cjson.encode(meta))
    return member
  end
  redis.call("HDEL", groups_key, group_ref(head))
  redis.call("HSET", groups_key, group_ref(member), cjson.encode(meta))
  redis.call("HSET", slot_key, field, member)
  return head
end
