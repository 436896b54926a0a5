-- One page of a user's inbox, newest first, with the whole inbox's counts
-- (the shared inbox preambles and _cache.lua come first: open_inbox
-- names the keys).
--
-- Paging walks the time axis (scores: item times in ms) downwards: items
-- with time <= time_max, skipping the first `skip` items at exactly time_max
-- (already returned); only items newer than since_time when given. New items
-- have later times, so they never shift a page a client is walking.
-- Returns {members, times, read bits, {more, next time_max, next skip},
-- counts} and on the fast path also the page's details and {tag, valid
-- until} to store the rendering under (or {"HIT", rendering} when the read
-- cache holds a current one).

pages_key, live_version_key = KEYS[12], KEYS[13]
local category, time_max, skip = ARGV[1], ARGV[2], tonumber(ARGV[3])
local limit, unread_only, since_time = tonumber(ARGV[4]), ARGV[5] == "1", ARGV[6]
-- A field naming the query ("" = none): the read cache keeps its rendering.
local field = ARGV[7]
if not open_inbox(2, 7, false) then return NOT_OPEN end

local cache = nil
if FAST and field ~= "" then
  local tag = cache_tag()
  local held = cache_held(field, tag)
  if held then return {"HIT", held} end
  cache = {tag, cache_until()}
end
local key = all_key
if category ~= "" then key = category_keys[category] end
-- An unread-only page ranges over the unread zset, which holds exactly the
-- unread members: it costs what a plain page costs, whatever is read.
if unread_only then
  key = unread_all_key
  if category ~= "" then key = unread_keys[category] end
end
local members, times, reads = {}, {}, {}
-- The next page's position: the last time returned and how many items at it
-- were returned (counted over skipped unread-only rows too).
local pos_time, pos_skip = nil, skip
if time_max ~= "+inf" then pos_time = tonumber(time_max) end
local pos_raw = time_max
local more = 0
local offset = skip
-- One row past the page tells whether there is more.
local batch = limit + 1
while more == 0 do
  local rows = call("ZREVRANGEBYSCORE", key, time_max, since_time, "WITHSCORES", "LIMIT", offset, batch)
  if #rows == 0 then break end
  for i = 1, #rows, 2 do
    local member, raw = rows[i], rows[i + 1]
    local _, _, month, off = parse(member)
    local bit = read_bit(month, off) or 0
    if (not unread_only) or bit == 0 then
      if #members == limit then more = 1; break end
      members[#members + 1] = member
      times[#times + 1] = raw
      reads[#reads + 1] = bit
    end
    local item_time = tonumber(raw)
    if pos_time ~= nil and item_time == pos_time then
      pos_skip = pos_skip + 1
    else
      pos_time, pos_raw, pos_skip = item_time, raw, 1
    end
  end
  if #rows < 2 * batch then break end
  offset = offset + batch
end
if FAST then
  local refs = {}
  for i, member in ipairs(members) do refs[i] = parse(member) end
  local details = {}
  if #refs > 0 then details = call("HMGET", detail_key, unpack(refs)) end
  return {members, times, reads, {more, pos_raw, pos_skip}, counts(), details, cache or {}}
end
return {members, times, reads, {more, pos_raw, pos_skip}, counts()}
