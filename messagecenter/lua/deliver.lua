-- Push one item into many inboxes in one call (write fan-out).
--
-- KEYS: per recipient a fixed stride of keys (core.keys.mc_deliver_keys):
--   +1 all-items zset, +2 the item's category zset, +3 unread counters hash,
--   +4 hidden set, then, only for an item that expires (expire ms > 0), the
--   expiry zset; then the months set, the push bitmap and the read bitmap of
--   the item's month, the live version, the unread zsets (all, the item's
--   category), the evicted set, [the notification zset]. An item
--   that never expires leaves the expiry zset alone, so its key is not sent:
--   one argument less per recipient for Redis to parse.
-- Each recipient's keys carry that recipient's hash tag. On a single Redis a
-- call carries a batch of recipients; on Redis Cluster every call carries the
-- keys of one slot only (the caller groups them), so it runs there too.
-- ARGV: 1 member, 2 ref, 3 category, 4 offset, 5 month, 6 score, 7 expire ms
-- (0 = never), 8 now ms, 9 stride (11, + 1 with the expiry zset, + 1 to index
-- a notification for the sweep), 10 event head, 11 event tail ("" = no
-- pub/sub), 12 the most items an inbox keeps (0 = no cap here), 13 the settle
-- step (expired members a recipient loses per delivery: at most that and
-- EVICT_MAX), 14 "1" when the stride holds the
-- expiry zset (always, from publish.py: an inbox over the cap loses expired
-- members first), then one channel per recipient when publishing.
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
local cap, step = tonumber(ARGV[12]), tonumber(ARGV[13])
local CHANNELS = 14  -- ARGV before the channels
local live = expire == 0 or expire > now
-- How many expiry-zset keys each recipient's stride holds (1 or 0, as sent).
local EXPIRY_KEYS = ARGV[14] == "1" and 1 or 0
local notify = stride - 11 - EXPIRY_KEYS
if (notify ~= 0 and notify ~= 1) or #KEYS % stride ~= 0 then
  return redis.error_reply("deliver.lua: KEYS do not fit the stride " .. stride)
end
local MONTHS, PUSHED, READ_BITS, VERSION = 5 + EXPIRY_KEYS, 6 + EXPIRY_KEYS, 7 + EXPIRY_KEYS, 8 + EXPIRY_KEYS
local UNREAD_ALL, UNREAD_CAT, EVICTED, NOTIF = 9 + EXPIRY_KEYS, 10 + EXPIRY_KEYS, 11 + EXPIRY_KEYS, 12 + EXPIRY_KEYS

-- >>> caps on write: an inbox over the cap after an insert loses its oldest
-- members here, at most EVICT_MAX per insert (an inbox filled before caps
-- were kept on write shrinks a little with every delivery too), expired ones
-- first (at most EVICT_MAX too; when more may be due none is evicted: the next read
-- settles expiry, then the cap, so the inbox keeps exactly the newest live
-- items). A member of the new item's category and month leaves everything
-- here (those are the keys at hand): a user who gets items of one kind keeps
-- every structure at the cap however long they do not read. Any other
-- member leaves all here; the rest of its removal (its category and unread
-- zsets, counter, push bit, expiry entry: keys of other categories and
-- months) waits in the evicted set for the next inbox script, which settles
-- it before answering (settle_evicted, _steps.lua).
local EVICT_MAX = 2
-- Expired members looked at per recipient per delivery: as few, since a
-- call carries up to a batch of recipients (a step each would make a call
-- of a hundred recipients remove thousands of members).
local expired_max = math.min(step, EVICT_MAX)
local function evict(member)
  if call("ZREM", all_key, member) == 0 then return end
  local _, cat, of_month, off = parse(member)
  if cat == category and of_month == month then
    -- Live (it was in all), so not parked: its expiry entry goes too.
    call("ZREM", category_keys[cat], member)
    if unread_drop(member, cat) == 1 then call("HINCRBY", counters_key, cat, -1) end
    bits_set(PUSH[month], off, 0)
    if EXPIRY_KEYS == 1 then call("ZREM", expiry_key, member) end
  else
    call("SADD", evicted_key, member)
  end
end

local function keep_cap()
  local over = call("ZCARD", all_key) - cap
  if over <= 0 then return end
  if EXPIRY_KEYS == 1 then
    local due = call("ZRANGEBYSCORE", expiry_key, "-inf", now, "LIMIT", 0, expired_max)
    for _, gone in ipairs(due) do
      -- A parked member's entry stays: its removal needs the parked zsets (the next read).
      if call("ZSCORE", all_key, gone) then
        evict(gone)
        call("ZREM", expiry_key, gone)
        over = over - 1
      end
    end
    if #due == expired_max then return end
  end
  if over > EVICT_MAX then over = EVICT_MAX end
  if over > 0 then
    for _, oldest in ipairs(call("ZRANGE", all_key, 0, over - 1)) do evict(oldest) end
  end
end
-- <<< caps on write <<<
local recipients = #KEYS / stride
-- An event reaches only subscribers of the channel (the project subscribes
-- by channel, never by pattern): one PUBSUB NUMSUB for the whole batch, then
-- a PUBLISH only where someone listens, instead of one per recipient. The
-- script runs atomically, so nobody subscribes in between.
local listening = nil
if tail ~= "" then
  listening = call("PUBSUB", "NUMSUB", unpack(ARGV, CHANNELS + 1, CHANNELS + recipients))
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
  unread_all_key, unread_keys[category], evicted_key = KEYS[base + UNREAD_ALL], KEYS[base + UNREAD_CAT], KEYS[base + EVICTED]
  if live and insert(member, ref, category, month, offset, score, expire_ms, expire > 0) then
    if cap > 0 then keep_cap() end  -- caps on write
    local version = call("INCR", KEYS[base + VERSION])
    if listening and listening[2 * i + 2] > 0 then
      call("PUBLISH", ARGV[CHANNELS + 1 + i], head .. version .. tail)
    end
    gained = gained + 1
  end
end
return gained
