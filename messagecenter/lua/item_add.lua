-- Details a user's fill brings back where Redis has none (after a loss, or
-- for items nobody held since). Never over a detail already there: an edit
-- that committed after the fill read PostgreSQL wrote a newer one. Never for
-- an item removed after the fill began (its removal deleted the detail, and
-- the fill may have read the item before the removal committed), nor for
-- one expired by now (the expiry sweep may have freed it already).
-- KEYS: 1 item detail hash, 2 removed zset. ARGV: 1 the removal version the
-- fill began at, 2 now ms, then quads of ref, inbox member, expiry ms
-- (0 = never), detail JSON. Returns how many details were added.

local detail_key, removed_key = KEYS[1], KEYS[2]
local since, now = tonumber(ARGV[1]), tonumber(ARGV[2])
local added = 0
for i = 3, #ARGV, 4 do
  local ref, member, expire = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
  local removed = redis.call("ZSCORE", removed_key, member)
  if (expire == 0 or expire > now) and not (removed and tonumber(removed) > since) then
    added = added + redis.call("HSETNX", detail_key, ref, ARGV[i + 3])
  end
end
return added
