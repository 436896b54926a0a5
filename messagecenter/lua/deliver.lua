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
-- Per recipient this is the merge's insert (the shared _item.lua comes
-- first and holds it): NX, so a rerun changes nothing; hidden refs
-- stay out; the unread counter moves only when the read bit is 0. A recipient whose inbox changed gets its live
-- version bumped and, when asked, the event published on its channel if
-- anyone subscribes to it: the same event live.inbox_changed sends, without a
-- round trip per recipient.

local member, ref, category = ARGV[1], ARGV[2], ARGV[3]
-- Offset, score and expiry go back to Redis as the strings they came in as:
-- a Lua number passed to redis.call is formatted by sprintf every time, which
-- cost more than some of the commands themselves.
local offset, month, score, expire_ms = ARGV[4], ARGV[5], ARGV[6], ARGV[7]
local expire, now, stride = tonumber(expire_ms), tonumber(ARGV[8]), tonumber(ARGV[9])
local head, tail = ARGV[10], ARGV[11]
local live = expire == 0 or expire > now
-- How many expiry-zset keys each recipient's stride holds: 1 for an item that expires, else 0.
local EXPIRY_KEYS = expire > 0 and 1 or 0
local notify = stride - 8 - EXPIRY_KEYS
if (notify ~= 0 and notify ~= 1) or #KEYS % stride ~= 0 then
  return redis.error_reply("deliver.lua: KEYS do not fit the stride " .. stride)
end
local MONTHS, PUSHED, READ_BITS, VERSION, NOTIF = 5 + EXPIRY_KEYS, 6 + EXPIRY_KEYS, 7 + EXPIRY_KEYS, 8 + EXPIRY_KEYS, 9 + EXPIRY_KEYS
local recipients = #KEYS / stride
-- An event reaches only subscribers of the channel (the project subscribes
-- by channel, never by pattern): one PUBSUB NUMSUB for the whole batch, then
-- a PUBLISH only where someone listens, instead of one per recipient. The
-- script runs atomically, so nobody subscribes in between.
local listening = nil
if tail ~= "" then
  listening = call("PUBSUB", "NUMSUB", unpack(ARGV, 12, 11 + recipients))
end
local gained = 0
for i = 0, recipients - 1 do
  local base = i * stride  -- this recipient's keys are KEYS[base + 1 ..]
  if notify == 1 then
    -- The sweep's index (score = expiry); NX like the inbox itself.
    call("ZADD", KEYS[base + NOTIF], "NX", expire_ms, member)
  end
  all_key, counters_key, hidden_key, months_key = KEYS[base + 1], KEYS[base + 3], KEYS[base + 4], KEYS[base + MONTHS]
  category_keys[category], PUSH[month], READ[month] = KEYS[base + 2], KEYS[base + PUSHED], KEYS[base + READ_BITS]
  if EXPIRY_KEYS == 1 then expiry_key = KEYS[base + 5] end
  if live and insert(member, ref, category, month, offset, score, expire_ms, EXPIRY_KEYS == 1) then
    local version = call("INCR", KEYS[base + VERSION])
    if listening and listening[2 * i + 2] > 0 then
      call("PUBLISH", ARGV[12 + i], head .. version .. tail)
    end
    gained = gained + 1
  end
end
return gained
