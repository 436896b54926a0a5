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
local E = expire > 0 and 1 or 0
local notify = stride - 8 - E
if (notify ~= 0 and notify ~= 1) or #KEYS % stride ~= 0 then
  return redis.error_reply("deliver.lua: KEYS do not fit the stride " .. stride)
end
local MONTHS, PUSHED, READ_BITS, VERSION, NOTIF = 5 + E, 6 + E, 7 + E, 8 + E, 9 + E
local n = #KEYS / stride
-- An event reaches only subscribers of the channel (the project subscribes
-- by channel, never by pattern): one PUBSUB NUMSUB for the whole batch, then
-- a PUBLISH only where someone listens, instead of one per recipient. The
-- script runs atomically, so nobody subscribes in between.
local listening = nil
if tail ~= "" then
  listening = call("PUBSUB", "NUMSUB", unpack(ARGV, 12, 11 + n))
end
local gained = 0
for i = 0, n - 1 do
  local k = i * stride
  if notify == 1 then
    -- The sweep's index (score = expiry); NX like the inbox itself.
    call("ZADD", KEYS[k + NOTIF], "NX", expire_ms, member)
  end
  all_key, counters_key, hidden_key, months_key = KEYS[k + 1], KEYS[k + 3], KEYS[k + 4], KEYS[k + MONTHS]
  category_keys[category], PUSH[month], READ[month] = KEYS[k + 2], KEYS[k + PUSHED], KEYS[k + READ_BITS]
  if E == 1 then expiry_key = KEYS[k + 5] end
  if live and insert(member, ref, category, month, offset, score, expire_ms, E == 1) then
    local version = call("INCR", KEYS[k + VERSION])
    if listening and listening[2 * i + 2] > 0 then
      call("PUBLISH", ARGV[12 + i], head .. version .. tail)
    end
    gained = gained + 1
  end
end
return gained
