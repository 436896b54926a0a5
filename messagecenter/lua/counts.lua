-- The user's unread counters and unseen count, once the inbox is settled and
-- merged (the shared inbox preambles and _cache.lua come first). Without a cache
-- lifetime it only settles and merges (a read of one item that has no detail).
-- On the fast path, with a lifetime (s), the counts are kept in the read
-- cache as "<name>,<n>,...|<unseen>" (rewritten only when they or their tag
-- changed). Returns {flat counters, unseen}.

local lifetime = ARGV[1]
local ib = open_inbox(2, 1, false)
if ib.not_open then return ib.not_open end
ib.pages_key, ib.live_version_key = KEYS[12], KEYS[13]

local result = counts(ib)
if ib.fast and lifetime ~= "" then
  local tag = cache_tag(ib)
  local value = table.concat(result[1], ",") .. "|" .. result[2]
  if cache_held(ib, "counts", tag) ~= value then
    call("HSET", ib.pages_key, "counts", value, "counts#", tag .. CACHE_UNTIL .. cache_until(ib))
    call("EXPIRE", ib.pages_key, lifetime)
  end
end
return result
