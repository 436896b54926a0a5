-- Grouped items (preamble of deliver.lua and group_merge.lua): one
-- recipient's groups of a key, kept in keys of the recipient's hash tag:
--   groups hash   ref of a group's row -> its JSON {key, count, actors, start}
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

local function group_actors(actors, actor)
  -- Newest first, distinct, at most three: the new actor leads, an older
  -- mention of it goes.
  local out = {}
  if actor ~= "" then out[1] = actor end
  for _, name in ipairs(actors) do
    if #out >= GROUP_ACTORS then break end
    if name ~= actor then out[#out + 1] = name end
  end
  return out
end

-- The item joins its group (or starts one). Returns the member that leaves
-- the list: the old row when the new item is newer, the new item itself
-- when it is older than the row, nil when it is the row.
local function group_join(groups_key, open_key, members_key, ends_key, closed_key, gkey, member, score, actor)
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
    meta = {key = gkey, count = 1, actors = group_actors({}, actor), start = tonumber(score)}
    redis.call("HSET", slot_key, field, member)
    redis.call("HSET", groups_key, group_ref(member), cjson.encode(meta))
    return nil
  end
  meta.count = meta.count + 1
  local actors = meta.actors
  if type(actors) ~= "table" then actors = {} end
  if tonumber(score) < meta.start then meta.start = tonumber(score) end
  local head_score = redis.call("ZSCORE", members_key, head)
  if head_score and not group_newer(score, member, head_score, head) then
    -- Older than the row: it counts, the row stays (its actors are newer).
    if actor ~= "" and #actors < GROUP_ACTORS then
      local known = false
      for _, name in ipairs(actors) do if name == actor then known = true end end
      if not known then actors[#actors + 1] = actor end
    end
    meta.actors = actors
    redis.call("HSET", groups_key, group_ref(head), cjson.encode(meta))
    return member
  end
  meta.actors = group_actors(actors, actor)
  redis.call("HDEL", groups_key, group_ref(head))
  redis.call("HSET", groups_key, group_ref(member), cjson.encode(meta))
  redis.call("HSET", slot_key, field, member)
  return head
end
