-- Replace a bulletin's config members and detail (_detail.lua,
-- _removals.lua and _bulletins.lua first).
-- KEYS: 1 item detail hash, 2 item detail version, 3 bulletin config zset,
-- 4 bulletin detail hash, 5 bulletin members hash, 6 bulletin update
-- marker, 7 removed zset, 8 removed version, 9 bulletin change log, 10 its
-- floor.
-- ARGV: 1 now (ms), 2 bulletin id, 3 ref, 4 item JSON, 5 member to remove
-- from every inbox ("" for a new bulletin), 6 n, then n x (config member,
-- display ms, config JSON). Returns n, or 0 for an edit that left every
-- config as it was (its title or body only): the detail is written and no
-- inbox settles or merges it again, so users' places of it stay.

local detail_key, detail_version_key, removed_key, removed_version_key = KEYS[1], KEYS[2], KEYS[7], KEYS[8]
local b = {}  -- the bulletins' keys (_bulletins.lua)
b.config_key, b.bulletin_detail_key, b.members_key, b.update_key = KEYS[3], KEYS[4], KEYS[5], KEYS[6]
b.changes_key, b.changes_floor_key = KEYS[9], KEYS[10]
local now, bid = tonumber(ARGV[1]), ARGV[2]
local member_count = tonumber(ARGV[6])

-- Are the stored configs exactly the ones given (members, display times,
-- JSON), each in the change log? (A config the log lost is written again in
-- full: the drift repair relies on that.)
local function configs_unchanged()
  local old = redis.call("HGET", b.members_key, bid)
  if not old then return false end
  local i = 0
  for member in string.gmatch(old, "[^,]+") do
    if i >= member_count or member ~= ARGV[7 + 3 * i] then return false end
    local score = redis.call("ZSCORE", b.config_key, member)
    if not score or tonumber(score) ~= tonumber(ARGV[8 + 3 * i]) then return false end
    if redis.call("HGET", b.bulletin_detail_key, member) ~= ARGV[9 + 3 * i] then return false end
    if not redis.call("ZSCORE", b.changes_key, member) then return false end
    i = i + 1
  end
  return i == member_count
end

if ARGV[5] ~= "" and configs_unchanged() then
  detail_put(detail_key, detail_version_key, ARGV[3], ARGV[4])
  return 0
end
drop_bulletin_config(b, bid)
detail_put(detail_key, detail_version_key, ARGV[3], ARGV[4])
local members = {}
for i = 0, member_count - 1 do
  local member, score, json = ARGV[7 + 3 * i], ARGV[8 + 3 * i], ARGV[9 + 3 * i]
  redis.call("ZADD", b.config_key, score, member)
  redis.call("HSET", b.bulletin_detail_key, member, json)
  members[#members + 1] = member
end
redis.call("HSET", b.members_key, bid, table.concat(members, ","))
mark_removed(removed_key, removed_version_key, ARGV[5])
-- Readers take in the log above their access time: these configs, at the new marker.
local marker = bump_update_time(b, now)
for _, member in ipairs(members) do redis.call("ZADD", b.changes_key, marker, member) end
return member_count
