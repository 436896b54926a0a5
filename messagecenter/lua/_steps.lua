-- Shared by the per-user inbox scripts (after _item.lua and _state.lua,
-- before _settle.lua): the bounded settling steps that need no removal,
-- each doing at most STEP members a call and setting MORE when some are
-- left (open_inbox then answers "AGAIN" and the caller calls again).

-- >>> unread zsets: an inbox written before them (or one the drift check
-- found out of step) has them and its counters built anew on its next reads,
-- at most STEP members a call walked upwards on the time axis (the state
-- hash's "uz": absent = start, the score walked up to, "done"; a score is
-- walked whole, so ties never split across calls). A member is counted when
-- it joins the unread zset, and removals uncount only members in it, so
-- deliveries and removals between two calls keep counters = ZCARD.
local function backfill_unread()
  local walked = call("HGET", state_key, "uz")
  if walked == "done" then return end
  local low = "-inf"
  if walked then
    low = "(" .. walked
  else
    -- UNLINK: a large zset is freed off the main thread, not within this call.
    call("UNLINK", counters_key, unread_all_key)
    for _, cat in ipairs(CATEGORIES) do call("UNLINK", unread_keys[cat]) end
  end
  local rows = call("ZRANGEBYSCORE", all_key, low, "+inf", "WITHSCORES", "LIMIT", 0, STEP)
  local last = rows[#rows]
  if last then
    for _, tie in ipairs(call("ZRANGEBYSCORE", all_key, last, last, "WITHSCORES")) do rows[#rows + 1] = tie end
  end
  for i = 1, #rows, 2 do
    local member = rows[i]
    local ref, cat, month, off = parse(member)
    if ref and unread_keys[cat] and read_bit(month, off) == 0
        and call("ZADD", unread_all_key, rows[i + 1], member) == 1 then
      call("ZADD", unread_keys[cat], rows[i + 1], member)
      call("HINCRBY", counters_key, cat, 1)
    end
  end
  if last and #rows >= 2 * STEP then
    call("HSET", state_key, "uz", last)
    MORE = true
  else
    call("HSET", state_key, "uz", "done")
  end
  touch()
end
-- <<< unread zsets <<<

-- >>> caps on write: the rest of a fan-out's evictions (_item.lua), at most
-- STEP members a call. A member back in all since stays; one still in its
-- category zset leaves it, the unread zsets and its counter (by the unread
-- zsets, which hold exactly its read bit), its push bit and its expiry entry.
local function settle_evicted()
  if not evicted_key then return end
  local popped = call("SPOP", evicted_key, STEP)
  if #popped == STEP and call("SCARD", evicted_key) > 0 then MORE = true end
  for _, member in ipairs(popped) do
    local ref, cat, month, off = parse(member)
    if ref and category_keys[cat] and not call("ZSCORE", all_key, member)
        and call("ZREM", category_keys[cat], member) == 1 then
      if unread_drop(member, cat) == 1 then call("HINCRBY", counters_key, cat, -1) end
      if PUSH[month] then bits_set(PUSH[month], off, 0) end
      -- A parked member (its ref hidden) keeps its entry; a deleted one has none.
      if call("SISMEMBER", hidden_key, ref) == 0 then call("ZREM", expiry_key, member) end
      touch()
    end
  end
end
-- <<< caps on write <<<
