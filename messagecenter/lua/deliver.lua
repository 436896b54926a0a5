-- Push one item into many inboxes in one call (write fan-out).
--
-- KEYS: per recipient a fixed stride of keys (core.keys.mc_deliver_keys):
--   +1 all-items zset, +2 hidden set, +3 arrivals zset, then, when the
--   stride holds it (ARGV 12), the expiry zset; then the months set, the
--   live version, the evicted set, [the notification zset], [the state hash
--   and its fill lock, when only held parts are written].
-- Each recipient's keys carry its hash tag; on Redis Cluster a call carries
-- the keys of one slot only (the caller groups them).
-- ARGV: 1 member, 2 ref, 3 month, 4 score, 5 expire ms (0 = never), 6 now ms,
-- 7 stride, 8 event head, 9 event tail ("" = no pub/sub), 10 the most items
-- an inbox keeps (0 = no cap), 11 the settle step (expired members a
-- recipient loses per delivery: at most that and EVICT_MAX), 12 "1" when the
-- stride holds the expiry zset (always from publish.py: an inbox over the
-- cap loses expired members first), 13 the group key ("" = not grouped), 14
-- the actor, 15 "1" to write only the parts Redis holds ("": every
-- recipient's; docs/ARCHITECTURE.md, "Arrivals"), then one channel per
-- recipient when publishing. A grouped item's stride ends with the
-- recipient's five group keys (groups, open and closed hashes, the key's
-- members and ends zsets). Returns how many inboxes gained the item.
--
-- Per recipient the item arrives: it joins all (NX, so a rerun changes
-- nothing; hidden refs stay out), its expiry entry and month, and the
-- arrivals zset; the recipient's next inbox script places it (place() in
-- _item.lua, settle_arrivals in _arrivals.lua) before it reads anything. A
-- recipient whose inbox changed gets its live version bumped and, if anyone
-- subscribes to its channel, the event live.inbox_changed sends.

local member, ref, month = ARGV[1], ARGV[2], ARGV[3]
-- Score and expiry go back to Redis as the strings they came in as: a Lua
-- number passed to redis.call is formatted by sprintf every time, which cost
-- more than some of the commands themselves.
local score, expire_ms = ARGV[4], ARGV[5]
local expire, now, stride = tonumber(expire_ms), tonumber(ARGV[6]), tonumber(ARGV[7])
local head, tail = ARGV[8], ARGV[9]
local cap, step = tonumber(ARGV[10]), tonumber(ARGV[11])
local CHANNELS = 15  -- ARGV before the channels
local gkey, actor = ARGV[13] or "", ARGV[14] or ""
local GROUP_KEYS = gkey ~= "" and 5 or 0
local CHECK_KEYS = ARGV[15] == "1" and 2 or 0
local live = expire == 0 or expire > now
-- How many expiry-zset keys each recipient's stride holds (1 or 0, as sent).
local EXPIRY_KEYS = ARGV[12] == "1" and 1 or 0
local notify = stride - 6 - EXPIRY_KEYS - GROUP_KEYS - CHECK_KEYS
if (notify ~= 0 and notify ~= 1) or #KEYS % stride ~= 0 then
  return redis.error_reply("deliver.lua: KEYS do not fit the stride " .. stride)
end
local MONTHS, VERSION, EVICTED = 4 + EXPIRY_KEYS, 5 + EXPIRY_KEYS, 6 + EXPIRY_KEYS
local NOTIF = 7 + EXPIRY_KEYS
local STATE = 7 + EXPIRY_KEYS + notify  -- then the fill lock
local call = redis.call

-- Whether the recipient's part takes the item: Redis holds it (filled, for
-- whichever generation), or it is being filled.
local function taken(base)
  if CHECK_KEYS == 0 or call("HEXISTS", KEYS[base + STATE], "fill") == 1 then return true end
  return call("EXISTS", KEYS[base + STATE + 1]) == 1
end

-- >>> caps on write (docs/ARCHITECTURE.md, "Caps on write, bounded settling"):
-- an inbox over the cap after an arrival loses its oldest members here, at
-- most EVICT_MAX per arrival, expired ones first (none when more may be due).
-- An arrival not placed yet leaves all, the arrivals and its expiry entry; a
-- placed member leaves all, the rest of its removal waits in the evicted set
-- for the next inbox script (settle_evicted, _steps.lua).
local EVICT_MAX = 2
-- Expired members looked at per recipient per delivery: as few, since a
-- call carries up to a batch of recipients (a step each would make a call
-- of a hundred recipients remove thousands of members).
local expired_max = math.min(step, EVICT_MAX)
-- r: the recipient's keys (bound in the loop below).
local function evict(r, gone)
  if call("ZREM", r.all_key, gone) == 0 then return end
  if call("ZREM", r.arrivals_key, gone) == 1 then
    if EXPIRY_KEYS == 1 then call("ZREM", r.expiry_key, gone) end
  else
    call("SADD", r.evicted_key, gone)
  end
end

local function keep_cap(r)
  local over = call("ZCARD", r.all_key) - cap
  if over <= 0 then return end
  if EXPIRY_KEYS == 1 then
    local due = call("ZRANGEBYSCORE", r.expiry_key, "-inf", now, "LIMIT", 0, expired_max)
    for _, gone in ipairs(due) do
      -- A parked member's entry stays: its removal needs the parked zsets (the next read).
      if call("ZSCORE", r.all_key, gone) then
        evict(r, gone)
        call("ZREM", r.expiry_key, gone)
        over = over - 1
      end
    end
    if #due == expired_max then return end
  end
  if over > EVICT_MAX then over = EVICT_MAX end
  if over > 0 then
    for _, oldest in ipairs(call("ZRANGE", r.all_key, 0, over - 1)) do evict(r, oldest) end
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
  local listens = listening and listening[2 * i + 2] > 0
  local takes = taken(base)
  if not takes then
    if live and listens then
      call("PUBLISH", ARGV[CHANNELS + 1 + i], head .. call("INCR", KEYS[base + VERSION]) .. tail)
    end
  elseif notify == 1 then
    -- The sweep's index (score = expiry); NX like the inbox itself.
    call("ZADD", KEYS[base + NOTIF], "NX", expire_ms, member)
  end
  local r = {}  -- this recipient's keys
  r.all_key, r.hidden_key, r.arrivals_key = KEYS[base + 1], KEYS[base + 2], KEYS[base + 3]
  if EXPIRY_KEYS == 1 then r.expiry_key = KEYS[base + 4] end
  r.months_key, r.evicted_key = KEYS[base + MONTHS], KEYS[base + EVICTED]
  if live and takes and call("SISMEMBER", r.hidden_key, ref) == 0 and call("ZADD", r.all_key, "NX", score, member) == 1 then
    call("ZADD", r.arrivals_key, score, member)
    if expire > 0 then call("ZADD", r.expiry_key, expire_ms, member) end
    call("SADD", r.months_key, month)
    if GROUP_KEYS > 0 then
      -- The group's row becomes the newest item; the item that leaves the
      -- list goes the way the cap's evictions go (the next read settles it).
      local group = base + stride - GROUP_KEYS
      local gone = group_join(KEYS[group + 1], KEYS[group + 2], KEYS[group + 4], KEYS[group + 5], KEYS[group + 3],
                              gkey, member, score, actor, expire)
      if gone then evict(r, gone) end
    end
    if cap > 0 then keep_cap(r) end  -- caps on write
    local version = call("INCR", KEYS[base + VERSION])
    if listens then
      call("PUBLISH", ARGV[CHANNELS + 1 + i], head .. version .. tail)
    end
    gained = gained + 1
  end
end
return gained
