-- Push one item into many inboxes in one call (write fan-out).
--
-- KEYS: per recipient a fixed stride of keys (core.keys.mc_deliver_keys):
--   +1 all-items zset, +2 the item's category zset, +3 unread counters hash,
--   +4 hidden set, then, only for an item that expires (expire ms > 0), the
--   expiry zset; then the months set, the push bitmap and the read bitmap of
--   the item's month, the live version, [the notification zset]. An item
--   that never expires leaves the expiry zset alone, so its key is not sent:
--   one argument less per recipient for Redis to parse.
-- Each recipient's keys carry that recipient's hash tag. On a single Redis a
-- call carries a batch of recipients; on Redis Cluster every call carries the
-- keys of one slot only (the caller groups them), so it runs there too.
-- ARGV: 1 member, 2 ref, 3 category, 4 offset, 5 month, 6 score, 7 expire ms
-- (0 = never), 8 now ms, 9 stride (8, + 1 with the expiry zset, + 1 to index
-- a notification for the sweep), 10 event head, 11 event tail ("" = no
-- pub/sub), then one channel per recipient when publishing.
-- Returns how many inboxes gained the item.
--
-- Per recipient this is inbox.lua's add (keep the two in step): NX, so a
-- rerun changes nothing; hidden refs stay out; the unread counter moves only
-- when the read bit is 0. A recipient whose inbox changed gets its live
-- version bumped and, when asked, the event published on its channel: the
-- same event live.inbox_changed sends, without a round trip per recipient.

local member, ref, category = ARGV[1], ARGV[2], ARGV[3]
local offset, month, score = tonumber(ARGV[4]), ARGV[5], ARGV[6]
local expire, now, stride = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])
local head, tail = ARGV[10], ARGV[11]
local live = expire == 0 or expire > now
local E = expire > 0 and 1 or 0
local notify = stride - 8 - E
if (notify ~= 0 and notify ~= 1) or #KEYS % stride ~= 0 then
  return redis.error_reply("deliver.lua: KEYS do not fit the stride " .. stride)
end
local MONTHS, PUSH, READ, VERSION, NOTIF = 5 + E, 6 + E, 7 + E, 8 + E, 9 + E
local gained = 0
for i = 0, #KEYS / stride - 1 do
  local k = i * stride
  if notify == 1 then
    -- The sweep's index (score = expiry); NX like the inbox itself.
    redis.call("ZADD", KEYS[k + NOTIF], "NX", expire, member)
  end
  if live and redis.call("SISMEMBER", KEYS[k + 4], ref) == 0
      and redis.call("ZADD", KEYS[k + 1], "NX", score, member) == 1 then
    redis.call("ZADD", KEYS[k + 2], score, member)
    if E == 1 then redis.call("ZADD", KEYS[k + 5], expire, member) end
    redis.call("SADD", KEYS[k + MONTHS], month)
    redis.call("SETBIT", KEYS[k + PUSH], offset, 1)
    if redis.call("GETBIT", KEYS[k + READ], offset) == 0 then
      redis.call("HINCRBY", KEYS[k + 3], category, 1)
    end
    local version = redis.call("INCR", KEYS[k + VERSION])
    if tail ~= "" then
      redis.call("PUBLISH", ARGV[12 + i], head .. version .. tail)
    end
    gained = gained + 1
  end
end
return gained
