-- One page of a user's inbox, newest first, with the whole inbox's counts
-- (the shared inbox preambles and _cache.lua come first: open_inbox
-- names the keys).
--
-- Paging walks the time axis (scores: item times in ms) downwards: items
-- with time <= time_max, skipping the first `skip` items at exactly time_max
-- (already returned); only items newer than since_time when given. New items
-- have later times, so they never shift a page a client is walking.
-- Returns {members, times, read bits, {more, next time_max, next skip},
-- counts, details, {tag, valid until} to store the rendering under, the
-- rows' groups, the reader's answers to the rows' actions}, or {"HIT",
-- rendering} when the read cache holds a current one. The details, the tag
-- and the answers come on the fast path only (false otherwise: the details
-- live in another cluster slot); the groups, in the user's slot, always.

-- The reader's answers (ref -> at ms x 4 + action index; mc_keys.inbox_answers):
-- read here, with the tag, so a page with actions costs no second round
-- trip and its rendering is kept under the tag its answers were read at.
local answers_key = KEYS[14]
local category, time_max, skip = ARGV[1], ARGV[2], tonumber(ARGV[3])
local limit, unread_only, since_time = tonumber(ARGV[4]), ARGV[5] == "1", ARGV[6]
-- A field naming the query ("" = none): the read cache keeps its rendering.
local field = ARGV[7]
local ib = open_inbox(3, 7, false)
if ib.not_open then return ib.not_open end
ib.pages_key, ib.live_version_key = KEYS[12], KEYS[13]

local cache = nil
if ib.fast and field ~= "" then
  local tag = cache_tag(ib)
  local held = cache_held(ib, field, tag)
  if held then return {"HIT", held} end
  cache = {tag, cache_until(ib)}
end
local key = ib.all_key
if category ~= "" then key = ib.category_keys[category] end
-- An unread-only page ranges over the unread zset, which holds exactly the
-- unread members: it costs what a plain page costs, whatever is read.
if unread_only then
  key = ib.unread_all_key
  if category ~= "" then key = ib.unread_keys[category] end
end
-- The next page's position: the last time returned and how many items at it
-- were returned.
local pos_time, pos_skip = nil, skip
if time_max ~= "+inf" then pos_time = tonumber(time_max) end
local pos_raw = time_max
-- Every member of the range is on the page (an unread-only page ranges over
-- an unread zset, which holds only unread members), so one range answers it;
-- one row past the page tells whether there is more.
local rows = call("ZREVRANGEBYSCORE", key, time_max, since_time, "WITHSCORES", "LIMIT", skip, limit + 1)
local members, times, reads = {}, {}, {}
local more = 0
for i = 1, #rows, 2 do
  if #members == limit then more = 1; break end
  local raw = rows[i + 1]
  members[#members + 1] = rows[i]
  times[#times + 1] = raw
  local item_time = tonumber(raw)
  if pos_time ~= nil and item_time == pos_time then
    pos_skip = pos_skip + 1
  else
    pos_time, pos_raw, pos_skip = item_time, raw, 1
  end
end
-- Read state: an item of the inbox is unread exactly while it is in the
-- unread zsets (the invariant every script keeps, _item.lua), so one ZMSCORE
-- answers a whole page, where a read bit per row cost a member parse and a
-- command each (a third of the call).
if unread_only then
  for i = 1, #members do reads[i] = 0 end
elseif #members > 0 then
  local unread = call("ZMSCORE", ib.unread_all_key, unpack(members))
  for i = 1, #members do reads[i] = unread[i] and 0 or 1 end
end
-- The reader's answers to the rows that offer actions, aligned with refs
-- (false: no actions, or unanswered). A detail names "actions" only when
-- the item has some (messagecenter/items.py), written compactly
-- (readmodel.entries.dumps), and inside a JSON string a quote is escaped,
-- so `"actions":` is found only as that key: a plain find tells, without
-- decoding the JSON (a pattern find costs several times more). Rows without
-- actions then cost no lookup (in a set still compact, each lookup walks it).
local function page_answers(refs, details)
  local asked, at = {}, {}
  for i, raw in ipairs(details) do
    if raw and string.find(raw, '"actions":', 1, true) then
      asked[#asked + 1] = refs[i]
      at[#asked] = i
    end
  end
  local answers = {}
  for i = 1, #refs do answers[i] = false end
  if #asked > 0 then
    local found = call("ZMSCORE", answers_key, unpack(asked))
    for j, value in ipairs(found) do answers[at[j]] = value end
  end
  return answers
end

-- The rows' groups. A group's "exp" is the earliest expiry among its items
-- (_group.lua): once passed, an item of a group of several is gone and the
-- row's count and actors with it. Redis cannot name what is left (the
-- items' details live in another slot), so a user-facing read answers
-- "REGROUP" and the caller fills the user again from PostgreSQL, where the
-- group re-forms; a kept rendering of the page is valid only until then.
local checked = ARGV[#ARGV] ~= ""
local refs, groups = {}, {}
if #members > 0 then
  for i, member in ipairs(members) do refs[i] = parse(member) end
  groups = call("HMGET", ib.groups_key, unpack(refs))
  for _, raw in ipairs(groups) do
    -- A plain find first: most groups never expire, and decoding every
    -- group's JSON cost a page a tenth more. (A group of one expires with
    -- its row, which the expiry zset already bounds the rendering by.)
    local at = raw and string.find(raw, '"exp":', 1, true)
    if at then
      local exp = tonumber(string.match(raw, "^%d+", at + 6))
      if checked and exp <= ib.now and cjson.decode(raw).count > 1 then return "REGROUP" end
      if cache and (cache[2] == "" or exp < tonumber(cache[2])) then cache[2] = tostring(exp) end
    end
  end
end
if ib.fast then
  local details = {}
  local answers = {}
  if #refs > 0 then
    details = call("HMGET", ib.detail_key, unpack(refs))
    answers = page_answers(refs, details)
  end
  return {members, times, reads, {more, pos_raw, pos_skip}, counts(ib), details, cache or {}, groups, answers}
end
return {members, times, reads, {more, pos_raw, pos_skip}, counts(ib), false, false, groups}
