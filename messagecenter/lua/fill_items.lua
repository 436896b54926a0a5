-- A user's fill: many items (none grouped) into one inbox in one call.
--
-- KEYS (one user, one hash tag; mc_keys.deliver_keys of one user with the
-- notification zset): 1 all zset, 2 hidden set, 3 arrivals zset,
-- 4 expiry zset, 5 months set, 6 live version, 7 evicted set, 8 the user's
-- notification zset (the expiry sweep's index).
-- ARGV: 1 now ms, 2 the most items an inbox keeps (0 = no cap), then six
-- per item: member, ref, month, score, expire ms (0 = never), "1" for a
-- notification.
-- Returns how many items the inbox gained.
--
-- What deliver.lua does for one recipient per item, for a batch of items of
-- one recipient: an item arrives (all, arrivals, expiry, months) unless it
-- expired, is hidden or is there already; the user's next inbox script places
-- it. The cap is kept once at the end of the call, oldest first, as deliver.lua
-- keeps it per arrival: a fill adds only arrivals, so an evicted one leaves all,
-- the arrivals and the expiry zset, and a placed one waits in the evicted set.
-- The version moves once; nobody is told (the user is the one reading).

local all_key, hidden_key, arrivals_key, expiry_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local months_key, version_key, evicted_key, notifications_key = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local now, cap = tonumber(ARGV[1]), tonumber(ARGV[2])
local call = redis.call
local FIELDS, FIRST = 6, 3
if (#ARGV - FIRST + 1) % FIELDS ~= 0 then
  return redis.error_reply("fill_items.lua: ARGV do not fit six per item")
end

local gained = 0
for i = FIRST, #ARGV, FIELDS do
  local member, ref, month, score, expire_ms = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]
  local expire = tonumber(expire_ms)
  if ARGV[i + 5] == "1" then call("ZADD", notifications_key, "NX", expire_ms, member) end
  if (expire == 0 or expire > now) and call("SISMEMBER", hidden_key, ref) == 0
      and call("ZADD", all_key, "NX", score, member) == 1 then
    call("ZADD", arrivals_key, score, member)
    if expire > 0 then call("ZADD", expiry_key, expire_ms, member) end
    call("SADD", months_key, month)
    gained = gained + 1
  end
end

if cap > 0 then
  local over = call("ZCARD", all_key) - cap
  if over > 0 then
    for _, oldest in ipairs(call("ZRANGE", all_key, 0, over - 1)) do
      call("ZREM", all_key, oldest)
      if call("ZREM", arrivals_key, oldest) == 1 then
        call("ZREM", expiry_key, oldest)
      else
        call("SADD", evicted_key, oldest)
      end
    end
  end
end
if gained > 0 then call("INCR", version_key) end
return gained
