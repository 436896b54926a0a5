-- Shared by the per-user inbox scripts (after _item.lua, _state.lua and
-- _batch.lua, before _settle.lua): the bounded settling steps that need no
-- removal, all of one call sharing its budget of ib.step members (take,
-- _state.lua) and setting ib.more when some are left (open_inbox then answers
-- "AGAIN" and the caller calls again).

-- >>> unread zsets: an inbox written before them (or one the drift check
-- found out of step) has them and its counters built anew on its next reads,
-- a step of members a call walked downwards on the time axis, newest first
-- (the state hash's "uz": absent = start, "top" = started, nothing walked,
-- the score walked down to, "done"; a score is walked whole, so ties never
-- split across calls). Newest first: an inbox far over the cap is trimmed
-- from the oldest end, so the walk never visits a member the trim takes.
-- A member is counted when it joins the unread zset, and removals uncount
-- only members in it, so deliveries and removals between two calls keep
-- counters = ZCARD.
-- Every writer since the unread zsets exist (deliver.lua, the merge, the
-- removals, the trims) keeps them and the counters in step, so an inbox
-- they wrote from its start has counters equal to its zsets' sizes: its
-- first read has nothing to walk (a 10,000-item inbox would take a hundred
-- calls). An inbox written before them has none while its counters count
-- unread items; the drift check forgets "uz" only when the sizes disagree.
local function unread_index_agrees(ib)
  local counters = call("HMGET", ib.counters_key, unpack(CATEGORIES))
  local total = 0
  for i, cat in ipairs(CATEGORIES) do
    local counted = tonumber(counters[i] or "0")
    if call("ZCARD", ib.unread_keys[cat]) ~= counted then return false end
    total = total + counted
  end
  return call("ZCARD", ib.unread_all_key) == total
end

local function backfill_unread(ib)
  if ib.arrivals_left then return end
  local walked = call("HGET", ib.state_key, "uz")
  if walked == "done" then return end
  if not walked and unread_index_agrees(ib) then
    call("HSET", ib.state_key, "uz", "done")
    return
  end
  if not walked then
    -- UNLINK: a large zset is freed off the main thread, not within this call.
    call("UNLINK", ib.counters_key, ib.unread_all_key)
    for _, cat in ipairs(CATEGORIES) do call("UNLINK", ib.unread_keys[cat]) end
    walked = "top"
    call("HSET", ib.state_key, "uz", walked)
    touch(ib)
  end
  local n = take(ib, ib.step)
  if n == 0 then
    ib.more = true
    return
  end
  local high = "+inf"
  if walked ~= "top" then high = "(" .. walked end
  local rows = call("ZREVRANGEBYSCORE", ib.all_key, high, "-inf", "WITHSCORES", "LIMIT", 0, n)
  local last = rows[#rows]
  local members, scores = {}, {}
  for i = 1, #rows, 2 do
    members[#members + 1] = rows[i]
    scores[rows[i]] = rows[i + 1]
  end
  if last and #rows >= 2 * n then
    -- The rest of the last score's ties, so that the next call starts below it.
    for _, tie in ipairs(call("ZRANGEBYSCORE", ib.all_key, last, last)) do
      if not scores[tie] then
        members[#members + 1] = tie
        scores[tie] = last
      end
    end
  end
  ib.budget = ib.budget + math.max(0, n - #members)
  -- Unread (read bit 0) members by category, their bits read month by month.
  local unread = {}
  for month, list in pairs(group(members, function(_, cat, m) return ib.unread_keys[cat] and ib.read[m] and m end)) do
    local bits = bits_get_many(ib.forms, ib.read[month], offsets(list))
    for i, member in ipairs(list) do
      if bits[i] == 0 then unread[#unread + 1] = member end
    end
  end
  local all_pairs = {}
  for cat, list in pairs(group(unread, category_of(ib))) do
    local pairs_ = {}
    for _, member in ipairs(list) do
      pairs_[#pairs_ + 1] = scores[member]
      pairs_[#pairs_ + 1] = member
      all_pairs[#all_pairs + 1] = scores[member]
      all_pairs[#all_pairs + 1] = member
    end
    -- Counted once: a member already there (delivered or merged since the
    -- walk began) is in both unread zsets and counted already.
    local added = call("ZADD", ib.unread_keys[cat], unpack(pairs_))
    if added > 0 then call("HINCRBY", ib.counters_key, cat, added) end
  end
  if #all_pairs > 0 then call("ZADD", ib.unread_all_key, unpack(all_pairs)) end
  if last and #rows >= 2 * n then
    call("HSET", ib.state_key, "uz", last)
    ib.more = true
  else
    call("HSET", ib.state_key, "uz", "done")
  end
  touch(ib)
end
-- <<< unread zsets <<<

-- >>> caps on write: the rest of a fan-out's evictions (_item.lua), a step
-- a call.

-- Whether one of these evicted members is the row of a group of several
-- items of which one expired. A delivery keeping the cap evicts expired
-- members first without the group keys at hand (deliver.lua), so such a
-- row can leave while the rest of its group stays out of the list; a
-- checked call then answers "REGROUP" and PostgreSQL re-forms the group.
local function expired_group_among(ib, members)
  local refs = {}
  for i, member in ipairs(members) do refs[i] = string.match(member, "^[^|]*") end
  for _, raw in ipairs(call("HMGET", ib.groups_key, unpack(refs))) do
    if raw then
      local meta = cjson.decode(raw)
      if meta.count > 1 and meta.exp and meta.exp <= ib.now then return true end
    end
  end
  return false
end

-- A member back in all since stays; one still in its category zset leaves
-- it, the unread zsets and its counter (by the unread zsets, which hold
-- exactly its read bit), its push bit and its expiry entry.
local function settle_evicted(ib)
  if not ib.evicted_key then return end
  local n = take(ib, ib.step)
  if n == 0 then
    if call("EXISTS", ib.evicted_key) == 1 then ib.more = true end
    return
  end
  local popped = call("SPOP", ib.evicted_key, n)
  ib.budget = ib.budget + (n - #popped)
  if #popped == n and call("EXISTS", ib.evicted_key) == 1 then ib.more = true end
  if #popped == 0 then return end
  local back = call("ZMSCORE", ib.all_key, unpack(popped))
  local gone = {}
  for i, member in ipairs(popped) do
    if not back[i] then gone[#gone + 1] = member end
  end
  if ib.checked and #gone > 0 and expired_group_among(ib, gone) then ib.regroup = true end
  drop_rest(ib, gone, true)
end
-- <<< caps on write <<<
