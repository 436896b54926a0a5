-- One user's inbox: every key arrives through KEYS and carries the user's hash
-- tag, so this runs on one Redis Cluster slot.
--
-- KEYS: 1 all-items zset, 2..5 category zsets (system, promotion, transaction,
-- interaction), 6 unread counters hash, 7 hidden set, 8 expiry zset, 9 months
-- set, 10 state hash, 11 bulletin access time, then n read bitmaps and n push
-- bitmaps, one per month listed in ARGV (op "sweep" takes one more key after
-- them: the user's notification zset; ops "read" and "read_all" take n more:
-- the user's ever-read bitmaps of the same months; "read_all" then one more,
-- the user's scratch key, and on the fast path one more again: the global
-- list of pending first reads, see op "read_all").
-- ARGV: 1 op, 2 now (ms), 3 n, 4..3+n months; then "1" + settle/merge
-- arguments, or "0", or "2" + max items (the checked fast path below); then
-- the op's own arguments.
--
-- Fast path ("2", single Redis only: the global keys live in another cluster
-- slot): six more KEYS after all others, 1 removal version, 2 pull sequence,
-- 3 bulletin update time, 4 bulletin config zset, 5 item detail hash, 6 item
-- detail version (ops "page" and "counts" there also take, after the
-- bitmaps, the user's page cache hash and live version: see "Read cache"
-- below). The
-- script checks here, atomically, what the caller's planning pipeline would
-- have checked: nothing to settle or merge (the user's watermarks are level
-- with the global markers) and every month of the user is among the n passed.
-- Then it settles expiry and runs the op in this one round trip (op "page"
-- also returns the page's details); otherwise it changes nothing and returns
-- "STALE", and the caller plans (the slower, cluster-safe route).
--
-- A member is "<ref>|<category>|<month>|<offset>": the category names its
-- zset and counter, (month, offset) its bits in seed 004's bitmaps.
-- Invariants kept by every op: counters[c] = members of category c whose read
-- bit is 0; a member's push bit is 1 exactly while it is in the inbox (so a
-- month's push bitmap is the set of the month's present items); the state
-- hash's "rev" moves whenever anything a page shows changes in the user's
-- keys (items, read bits, counters, the seen watermark).

local CAT = {system = 2, promotion = 3, transaction = 4, interaction = 5}
local op = ARGV[1]
local now = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
local READ, PUSH, MONTH_INDEX = {}, {}, {}
for i = 1, n do
  MONTH_INDEX[ARGV[3 + i]] = i
  READ[ARGV[3 + i]] = KEYS[11 + i]
  PUSH[ARGV[3 + i]] = KEYS[11 + n + i]
end
local a = 4 + n

-- Ever-read bits (1 = the user has read the item at least once; never
-- cleared, "unread" leaves them): a read bit going 0 -> 1 is a first read
-- only when its ever-read bit was 0, so read/unread/read counts once.
local function first_read(month, off)
  local key = KEYS[11 + 2 * n + MONTH_INDEX[month]]
  return redis.call("SETBIT", key, off, 1) == 0
end

local function parse(member)
  local ref, cat, month, off = string.match(member, "^([^|]+)|([^|]+)|([^|]+)|([^|]+)$")
  return ref, cat, month, tonumber(off)
end

-- nil when the month's bitmap was not passed (the caller's view of the
-- months set was older than this item): such items are left alone.
local function read_bit(month, off)
  local key = READ[month]
  if not key then return nil end
  return redis.call("GETBIT", key, off)
end

local TOUCHED = false
local function touch()
  if not TOUCHED then
    redis.call("HINCRBY", KEYS[10], "rev", 1)
    TOUCHED = true
  end
end

local function remove(member)
  local ref, cat, month, off = parse(member)
  if not ref or not CAT[cat] then return 0 end
  local bit = read_bit(month, off)
  if bit == nil then return 0 end
  if redis.call("ZREM", KEYS[1], member) == 0 then return 0 end
  redis.call("ZREM", KEYS[CAT[cat]], member)
  redis.call("ZREM", KEYS[8], member)
  redis.call("SETBIT", PUSH[month], off, 0)
  if bit == 0 then redis.call("HINCRBY", KEYS[6], cat, -1) end
  touch()
  return 1
end

local function add(member, score, expire)
  local ref, cat, month, off = parse(member)
  if not ref or not CAT[cat] or not READ[month] then return 0 end
  if expire > 0 and expire <= now then return 0 end
  if redis.call("SISMEMBER", KEYS[7], ref) == 1 then return 0 end
  -- NX: running a fan-out or a merge twice changes nothing.
  if redis.call("ZADD", KEYS[1], "NX", score, member) == 0 then return 0 end
  redis.call("ZADD", KEYS[CAT[cat]], score, member)
  if expire > 0 then redis.call("ZADD", KEYS[8], expire, member) end
  redis.call("SADD", KEYS[9], month)
  redis.call("SETBIT", PUSH[month], off, 1)
  if redis.call("GETBIT", READ[month], off) == 0 then
    redis.call("HINCRBY", KEYS[6], cat, 1)
  end
  touch()
  return 1
end

-- Is the member a live item of this inbox ("is readable": pushed and present)?
local function present(member)
  local ref, cat, month, off = parse(member)
  if not ref or not READ[month] then return false end
  if not redis.call("ZSCORE", KEYS[1], member) then return false end
  return redis.call("GETBIT", PUSH[month], off) == 1
end

-- The earliest expiry still ahead once settled ("" = none): a cached page
-- is valid until then.
local NEXT_EXPIRY = ""

local function settle_expired()
  -- Expiry is exact: an item whose expire_at has come is gone from every view.
  local first = redis.call("ZRANGE", KEYS[8], 0, 0, "WITHSCORES")
  if #first == 2 and tonumber(first[2]) <= now then
    local expired = redis.call("ZRANGEBYSCORE", KEYS[8], "-inf", now)
    for _, member in ipairs(expired) do remove(member) end
    first = redis.call("ZRANGE", KEYS[8], 0, 0, "WITHSCORES")
  end
  if #first == 2 then NEXT_EXPIRY = first[2] else NEXT_EXPIRY = "" end
end

local function trim(max_items)
  local extra = redis.call("ZCARD", KEYS[1]) - max_items
  if extra > 0 then
    for _, member in ipairs(redis.call("ZRANGE", KEYS[1], 0, extra - 1)) do remove(member) end
  end
end

-- What level() read that the page cache's tag needs too: the user's rev and
-- the rest of the tag (see "Page cache" below).
local LEVEL_REV, LEVEL_TAIL = "0", ""

-- Would planning find nothing to settle or merge? Mirrors readmodel/inbox.py _plan.
local function level(g)
  for _, month in ipairs(redis.call("SMEMBERS", KEYS[9])) do
    if not MONTH_INDEX[month] then return false end
  end
  local state = redis.call("HMGET", KEYS[10], "settled", "pull", "bd", "rev")
  local access = redis.call("GET", KEYS[11])
  if not access or not state[3] then return false end
  -- removal version, pull sequence, bulletin update time, item detail version
  local marks = redis.call("MGET", KEYS[g], KEYS[g + 1], KEYS[g + 2], KEYS[g + 5])
  if tonumber(marks[1] or "0") > tonumber(state[1] or "0") then return false end
  if tonumber(marks[2] or "0") > tonumber(state[2] or "0") then return false end
  if tonumber(marks[3] or "0") > tonumber(access) then return false end
  local latest = redis.call("ZREVRANGEBYSCORE", KEYS[g + 3], now, "-inf", "WITHSCORES", "LIMIT", 0, 1)
  if #latest == 2 and tonumber(latest[2]) > tonumber(state[3]) then return false end
  LEVEL_REV = state[4] or "0"
  LEVEL_TAIL = table.concat({marks[4] or "0", marks[1] or "0", marks[2] or "0", marks[3] or "0", state[3], access}, ":")
  return true
end

-- The item detail hash when on the fast path (op "page" returns details).
local DETAIL = nil
local FAST = false

-- Settle and merge --------------------------------------------------------
local G = nil
if ARGV[a] == "2" then
  G = #KEYS - 5
  if not level(G) then return "STALE" end
  DETAIL = KEYS[G + 4]
  FAST = true
  settle_expired()
  trim(tonumber(ARGV[a + 1]))
  a = a + 2
elseif ARGV[a] == "1" then
  local settled = ARGV[a + 1]
  local nrem = tonumber(ARGV[a + 2])
  a = a + 3
  for i = 0, nrem - 1 do remove(ARGV[a + i]) end
  a = a + nrem
  settle_expired()
  local ncand = tonumber(ARGV[a])
  a = a + 1
  for i = 0, ncand - 1 do
    add(ARGV[a + 3 * i], tonumber(ARGV[a + 3 * i + 1]), tonumber(ARGV[a + 3 * i + 2]))
  end
  a = a + 3 * ncand
  if settled ~= "" then redis.call("HSET", KEYS[10], "settled", settled) end
  if ARGV[a] ~= "" then redis.call("SET", KEYS[11], ARGV[a]) end
  if ARGV[a + 1] ~= "" then redis.call("HSET", KEYS[10], "bd", ARGV[a + 1]) end
  if ARGV[a + 2] ~= "" then redis.call("HSET", KEYS[10], "pull", ARGV[a + 2]) end
  local max_items = tonumber(ARGV[a + 3])
  a = a + 4
  trim(max_items)
else
  a = a + 1
end

-- Read cache (fast path): the user's page-cache hash keeps rendered first
-- pages (op "page") and the counts (op "counts"), each under a field with
-- "<tag>|<valid until>" under the field plus "#". The tag is every value
-- they depend on: the user's rev, the live version deliveries bump, the
-- item details' version edits bump, and what level() compared (removal
-- version, pull sequence, bulletin update time, the user's bulletin marks).
-- Valid until: the earliest expiry in the inbox or the next bulletin display
-- time, whichever comes first (time moves them then, no write does). While
-- every value of the tag is unchanged and that time has not come, a stored
-- value is what a computation now would give: it is served as stored, here
-- or by the caller's check of the same values without this script
-- (readmodel/inbox.py _cache_check_commands; keep the two in step).
local function cache_tag()
  local rev = LEVEL_REV
  if TOUCHED then rev = redis.call("HGET", KEYS[10], "rev") or "0" end
  return rev .. ":" .. (redis.call("GET", KEYS[13 + 2 * n]) or "0") .. ":" .. LEVEL_TAIL
end

local function cache_until()
  local until_ = NEXT_EXPIRY
  local after_now = "(" .. ARGV[2]
  local shows = redis.call("ZRANGEBYSCORE", KEYS[G + 3], after_now, "+inf", "WITHSCORES", "LIMIT", 0, 1)
  if #shows == 2 and (until_ == "" or tonumber(shows[2]) < tonumber(until_)) then until_ = shows[2] end
  return until_
end

-- The value held under field if its tag is current, else nil.
local function cache_held(field, tag)
  local held = redis.call("HMGET", KEYS[12 + 2 * n], field .. "#", field)
  if held[1] and held[2] then
    local t, until_ = string.match(held[1], "^([^|]*)|([^|]*)$")
    if t == tag and (until_ == "" or now < tonumber(until_)) then return held[2] end
  end
  return nil
end

local function counts()
  local flat = redis.call("HGETALL", KEYS[6])
  local seen = redis.call("HGET", KEYS[10], "seen") or "-inf"
  if seen ~= "-inf" then seen = "(" .. seen end
  return {flat, redis.call("ZCOUNT", KEYS[1], seen, "+inf")}
end

-- Ops ----------------------------------------------------------------------
if op == "add" then
  return add(ARGV[a], tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]))

elseif op == "sync" then
  return counts()

elseif op == "counts" then
  local result = counts()
  -- On the fast path, with ARGV[a] the read cache's lifetime (s), the counts
  -- are kept in the read cache as "<name>,<n>,...|<unseen>" (rewritten only
  -- when they or their tag changed).
  if FAST and (ARGV[a] or "") ~= "" then
    local tag = cache_tag()
    local value = table.concat(result[1], ",") .. "|" .. result[2]
    if cache_held("counts", tag) ~= value then
      redis.call("HSET", KEYS[12 + 2 * n], "counts", value, "counts#", tag .. "|" .. cache_until())
      redis.call("EXPIRE", KEYS[12 + 2 * n], ARGV[a])
    end
  end
  return result

elseif op == "page" then
  -- Seed 001's scroll: items with score <= max, skipping the first `skip`
  -- items at exactly score max (already returned), newest first. New items
  -- have higher scores, so they never shift a page a client is walking.
  local cat, max, skip = ARGV[a], ARGV[a + 1], tonumber(ARGV[a + 2])
  local limit, unread_only, min = tonumber(ARGV[a + 3]), ARGV[a + 4] == "1", ARGV[a + 5]
  -- Page cache (fast path, ARGV[a + 6] a field naming the query, "" = none;
  -- see "Read cache" above): the caller keeps the rendered page under that
  -- field. A current one is served; otherwise the page is computed and comes
  -- back with {tag, valid until} for the caller to store.
  local cache = nil
  local field = ARGV[a + 6] or ""
  if FAST and field ~= "" then
    local tag = cache_tag()
    local held = cache_held(field, tag)
    if held then return {"HIT", held} end
    cache = {tag, cache_until()}
  end
  local key = KEYS[1]
  if cat ~= "" then key = KEYS[CAT[cat]] end
  local members, scores, reads = {}, {}, {}
  local pos_score, pos_skip = nil, skip
  if max ~= "+inf" then pos_score = tonumber(max) end
  local pos_raw = max
  local more = 0
  local offset = skip
  -- One row past the page tells whether there is more; unread-only pages
  -- skip read rows, so they read ahead in larger batches.
  local batch = limit + 1
  if unread_only then batch = 200 end
  while more == 0 do
    local rows = redis.call("ZREVRANGEBYSCORE", key, max, min, "WITHSCORES", "LIMIT", offset, batch)
    if #rows == 0 then break end
    for i = 1, #rows, 2 do
      local member, raw = rows[i], rows[i + 1]
      local ref, c, month, off = parse(member)
      local bit = read_bit(month, off) or 0
      if (not unread_only) or bit == 0 then
        if #members == limit then more = 1; break end
        members[#members + 1] = member
        scores[#scores + 1] = raw
        reads[#reads + 1] = bit
      end
      local s = tonumber(raw)
      if pos_score ~= nil and s == pos_score then
        pos_skip = pos_skip + 1
      else
        pos_score, pos_raw, pos_skip = s, raw, 1
      end
    end
    if #rows < 2 * batch then break end
    offset = offset + batch
  end
  if DETAIL then
    local refs = {}
    for i, member in ipairs(members) do refs[i] = parse(member) end
    local details = {}
    if #refs > 0 then details = redis.call("HMGET", DETAIL, unpack(refs)) end
    return {members, scores, reads, {more, pos_raw, pos_skip}, counts(), details, cache or {}}
  end
  return {members, scores, reads, {more, pos_raw, pos_skip}, counts()}

elseif op == "get" then
  local member = ARGV[a]
  if not present(member) then return false end
  local ref, cat, month, off = parse(member)
  return {redis.call("ZSCORE", KEYS[1], member), read_bit(month, off)}

elseif op == "read" or op == "unread" then
  local member = ARGV[a]
  if not present(member) then return 0 end
  local ref, cat, month, off = parse(member)
  local want = 1
  if op == "unread" then want = 0 end
  local old = redis.call("SETBIT", READ[month], off, want)
  if old ~= want then
    touch()
    if want == 1 then redis.call("HINCRBY", KEYS[6], cat, -1) else redis.call("HINCRBY", KEYS[6], cat, 1) end
  end
  -- 2: the user's first read of the item (the caller counts it; the
  -- per-item counter is a global key, so it is not touched here).
  if want == 1 and old == 0 and first_read(month, off) then return 2 end
  return 1

elseif op == "hide" then
  local member = ARGV[a]
  if not present(member) then return 0 end
  local ref = parse(member)
  redis.call("SADD", KEYS[7], ref)
  return remove(member)

elseif op == "hide_ref" then
  -- Rebuild/replay path: the ref is hidden even if it is not (yet) merged.
  redis.call("SADD", KEYS[7], ARGV[a])
  return 1

elseif op == "read_all" then
  -- One step: every live unread item of the category (or all) becomes read.
  -- An optional upper score bound (ARGV[a + 1], "" = none) limits it to items
  -- that existed when the user asked: a "read all" accepted while Redis was
  -- down and replayed later must not swallow items that arrived meanwhile.
  -- ARGV[a + 2] is the hour bucket the first reads count in.
  -- First reads (read bit 0 -> 1 while the ever-read bit was 0) are counted
  -- per item by the caller (the per-item counters are global keys): they come
  -- back as {marked, first refs, {month, first-read bitmap, ...}}. On the fast
  -- path the script queues them itself on the pending list (the key after the
  -- scratch key), in reads.py's entry formats, and returns {marked, {}, {}}.
  local cat = ARGV[a]
  local upto = ARGV[a + 1]
  local hour = ARGV[a + 2]
  if upto == nil or upto == "" then upto = "+inf" end
  local scratch = KEYS[12 + 3 * n]
  local pending = nil
  if FAST then pending = KEYS[13 + 3 * n] end
  local marked, first, first_maps = 0, {}, {}
  if cat == "" and upto == "+inf" then
    -- Everything: a month's push bitmap is the month's present items, so the
    -- read bits become read OR push, with bit operations instead of a walk over
    -- every item (10,000 items cost a few BITOPs per month). The counters say
    -- how many were unread; all of them are 0 afterwards.
    for _, v in ipairs(redis.call("HVALS", KEYS[6])) do
      local count = tonumber(v)
      if count > 0 then marked = marked + count end
    end
    for i = 1, n do
      local read, push, ever = KEYS[11 + i], KEYS[11 + n + i], KEYS[11 + 2 * n + i]
      if redis.call("EXISTS", push) == 1 then
        -- first reads = push AND NOT ever = push XOR (push AND ever)
        redis.call("BITOP", "AND", scratch, push, ever)
        redis.call("BITOP", "XOR", scratch, scratch, push)
        if redis.call("BITCOUNT", scratch) > 0 then
          first_maps[#first_maps + 1] = ARGV[3 + i]
          first_maps[#first_maps + 1] = redis.call("GET", scratch)
        end
        redis.call("BITOP", "OR", read, read, push)
        redis.call("BITOP", "OR", ever, ever, push)
      end
    end
    redis.call("DEL", scratch, KEYS[6])
    if marked > 0 then touch() end
  else
    local key = KEYS[1]
    if cat ~= "" then key = KEYS[CAT[cat]] end
    local by_cat = {}
    for _, member in ipairs(redis.call("ZRANGEBYSCORE", key, "-inf", upto)) do
      local ref, c, month, off = parse(member)
      if READ[month] and redis.call("SETBIT", READ[month], off, 1) == 0 then
        marked = marked + 1
        by_cat[c] = (by_cat[c] or 0) + 1
        if first_read(month, off) then first[#first + 1] = ref end
      end
    end
    -- One counter write per category, not one per item.
    for c, count in pairs(by_cat) do redis.call("HINCRBY", KEYS[6], c, -count) end
    if marked > 0 then touch() end
  end
  if pending then
    if #first > 0 then redis.call("RPUSH", pending, hour .. "|" .. table.concat(first, ",")) end
    for i = 1, #first_maps, 2 do
      redis.call("RPUSH", pending, hour .. "|@" .. first_maps[i] .. "|" .. first_maps[i + 1])
    end
    return {marked, {}, {}}
  end
  return {marked, first, first_maps}

elseif op == "seen" then
  local top = redis.call("ZREVRANGE", KEYS[1], 0, 0, "WITHSCORES")
  local mark = now
  if #top == 2 and tonumber(top[2]) > mark then mark = tonumber(top[2]) end
  redis.call("HSET", KEYS[10], "seen", string.format("%d", mark))
  touch()
  return 1

elseif op == "drop_prefix" then
  -- Group membership changed: drop the items of one kind (bulletins) and
  -- forget the merge marker, so the next read merges what is visible now.
  -- Read bits live in the bitmaps and survive.
  local prefix = ARGV[a]
  local dropped = 0
  for _, member in ipairs(redis.call("ZRANGE", KEYS[1], 0, -1)) do
    if string.sub(member, 1, #prefix) == prefix then dropped = dropped + remove(member) end
  end
  redis.call("DEL", KEYS[11])
  redis.call("HDEL", KEYS[10], "bd")
  return dropped

elseif op == "sweep" then
  -- Seed 003's expiry job for one user, bounded: the extra key after the
  -- bitmaps is the user's notification zset (score = expire_at ms). Expired
  -- notifications leave the inbox (counters kept exact), then the zset.
  -- Returns {removed from the inbox, 1 if more expired ones remain, left}.
  local notif = KEYS[12 + 2 * n]
  local limit = tonumber(ARGV[a])
  local rows = redis.call("ZRANGEBYSCORE", notif, "-inf", now, "LIMIT", 0, limit)
  local removed = 0
  for _, member in ipairs(rows) do removed = removed + remove(member) end
  local more = 0
  if #rows < limit then
    redis.call("ZREMRANGEBYSCORE", notif, "-inf", now)
  else
    redis.call("ZREM", notif, unpack(rows))
    more = 1
  end
  return {removed, more, redis.call("ZCARD", notif)}
end
return redis.error_reply("unknown op " .. tostring(op))
