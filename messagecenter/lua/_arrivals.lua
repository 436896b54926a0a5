-- Shared by the per-user inbox scripts (after _item.lua and _state.lua,
-- before _steps.lua, whose unread walk waits for it): the bounded step that
-- places a fan-out's arrivals, sharing the call's budget of ib.step members
-- (take, _state.lua) and setting ib.more when some are left.

-- >>> arrivals (_item.lua): a fan-out's members take their places, oldest
-- first, a step a call. ib.arrivals_left when some wait for the next call: the
-- unread walk (_steps.lua) waits for them too (it would count them before place()
-- does). A member gone from all since (removed, expired, trimmed, evicted)
-- has nothing to take; one of a month whose bitmaps the caller did not pass
-- (its months were read before the fan-out) waits for a call that passes them,
-- behind the others.

-- Placing a member costs about what removing one does: both go as a few
-- variadic commands per batch (place_many, remove_live), plus the bits one
-- by one. Each arrival counts as that many members of the call's budget, so
-- a call stays as short as the other steps' (at least one arrival a call, so
-- a step of 1 still ends).
local ARRIVAL_COST = 1
local function settle_arrivals(ib)
  local budget = take(ib, ib.step)
  local n = 0
  if budget > 0 then n = math.max(1, math.floor(budget / ARRIVAL_COST)) end
  if n == 0 then
    if call("EXISTS", ib.arrivals_key) == 1 then ib.more, ib.arrivals_left = true, true end
    return
  end
  local rows = call("ZPOPMIN", ib.arrivals_key, n)
  local got = #rows / 2
  ib.budget = ib.budget + math.max(0, budget - got * ARRIVAL_COST)
  if got == 0 then return end
  -- Popped for the first time (a finite score): not yet sent to the back.
  local members, first_time = {}, 0
  for i = 1, #rows, 2 do
    members[#members + 1] = rows[i]
    if rows[i + 1] ~= "inf" then first_time = first_time + 1 end
  end
  local times = call("ZMSCORE", ib.all_key, unpack(members))
  local placing, waiting = {}, {}
  for i, member in ipairs(members) do
    local time = times[i]
    local ref, cat, month, off = parse(member)
    if time and ref and ib.category_keys[cat] then
      if ib.read[month] then
        placing[#placing + 1] = {member, cat, month, off, time}
      else
        -- Back behind every other arrival (+inf): a step that pops only
        -- these has nothing left that this call could place.
        waiting[#waiting + 1] = "+inf"
        waiting[#waiting + 1] = member
      end
    end
  end
  place_many(ib, placing)
  local placed = #placing
  if #waiting > 0 then call("ZADD", ib.arrivals_key, unpack(waiting)) end
  if (got == n or #waiting > 0) and call("EXISTS", ib.arrivals_key) == 1 then
    -- The unread walk waits while any arrival is left. Another call only
    -- when this step was full and moved something (placed it, or sent it
    -- back): a full step of members already sent back means only those
    -- waiting for their month are left, and calling again with the same
    -- months would loop.
    ib.arrivals_left = true
    if got == n and first_time > 0 then ib.more = true end
  end
  if placed > 0 then touch(ib) end
end
-- <<< arrivals <<<
