-- Group the broadcasts a read is about to merge (pull items with a group
-- key), before the merge: each joins its key's open group the way a
-- delivered item does (_group.lua), so a broadcast groups as a push does.
-- KEYS: 1 all, 2 arrivals, 3 expiry, 4 evicted, 5 groups hash, 6 open hash,
--   7 closed hash, 8 hidden set, then per candidate its key's members and
--   ends zsets (core.keys.mc_inbox_group, mc_inbox_group_ends).
-- ARGV: per candidate 5 values: group key, member, score, actor, expiry (ms,
--   0 = never).
-- Returns the candidates the merge must leave out (a newer item of their
-- group took the row first). A listed member that leaves the list goes the
-- way the fan-out's evictions go: the read that follows settles it.
local all_key, arrivals_key, expiry_key, evicted_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local dropped = {}
for i = 0, #ARGV / 5 - 1 do
  local gkey, member, score, actor = ARGV[5 * i + 1], ARGV[5 * i + 2], ARGV[5 * i + 3], ARGV[5 * i + 4]
  local expire = tonumber(ARGV[5 * i + 5])
  local gone = nil
  -- An item the user deleted joins no group (the merge leaves it out too).
  if redis.call("SISMEMBER", KEYS[8], string.match(member, "^[^|]+")) == 0 then
    gone = group_join(KEYS[5], KEYS[6], KEYS[9 + 2 * i], KEYS[10 + 2 * i], KEYS[7], gkey, member, score, actor, expire)
  end
  if gone then
    if redis.call("ZREM", all_key, gone) == 0 then
      dropped[#dropped + 1] = gone  -- not merged yet: the merge leaves it out
    elseif redis.call("ZREM", arrivals_key, gone) == 1 then
      redis.call("ZREM", expiry_key, gone)
    else
      redis.call("SADD", evicted_key, gone)
    end
  end
end
return dropped
