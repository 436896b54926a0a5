-- Shared by the per-user inbox scripts: core/lua.py prepends
-- this file to each of them (LuaScript(..., preambles=...)), so the item's
-- layout and its insertion exist once. It defines names only; each script
-- names its own keys (_inbox.lua's open_inbox for the inbox scripts).
--
-- A member is "<ref>|<category>|<month>|<offset>": the category names its
-- zset and counter, (month, offset) its bits in the read/push bitmaps.
-- Score = the item's time in ms (creation, or a bulletin's display time):
-- the inbox's one time axis. Page positions ("time_max"), "since" and the
-- seen watermark are points on that axis, named as such below.
-- Invariants kept by every script, over the members of all that are not
-- arrivals (a fan-out's, placed by the next inbox script before it reads
-- anything: arrivals_key below): counters[c] = members of category c whose
-- read bit is 0 = ZCARD of c's unread zset (the unread zsets hold exactly
-- the placed live members whose read bit is 0: one for all, one per
-- category); a member's push bit is 1 exactly while it is placed in the
-- inbox; the state hash's "rev" moves whenever anything a page shows changes
-- in the user's keys (items, read bits, counters, the seen watermark).

local call = redis.call
local CATEGORIES = {"system", "promotion", "transaction", "interaction"}
-- Every helper that touches the inbox takes the call's inbox `ib` first:
-- its keys by name and the call's state (open_inbox builds it, _inbox.lua),
-- never a name shared by the whole chunk.
-- >>> unread zsets: same members and scores as all / the category zsets,
-- holding exactly the live members whose read bit is 0 (an unread-only page
-- is a plain range of one; each read-bit change below has its step here):
-- ib.unread_all_key, and ib.unread_keys by category.
-- Caps on write: members a fan-out took out of all (over the cap, or
-- expired) whose category zset, unread zsets, counter, push bit and expiry
-- entry the next inbox script settles (settle_evicted, _steps.lua): the
-- fan-out holds none of those keys: ib.evicted_key.
-- Arrivals: members a fan-out put in all (with their expiry entry and month)
-- whose other places (category zset, push bit, unread zsets and counter) the
-- next inbox script gives them (settle_arrivals, _arrivals.lua; present(),
-- _state.lua, for one member at once): a fan-out writes a few keys per
-- recipient, and a user who never reads never pays for the rest. zset,
-- score = the item's time (+inf: waiting for a call that passes its month):
-- ib.arrivals_key. The rows' groups (ref of a grouped row -> JSON of its
-- group; mc_keys.inbox_groups): ib.groups_key.

local function unread_add(ib, member, cat, time)
  call("ZADD", ib.unread_all_key, time, member)
  call("ZADD", ib.unread_keys[cat], time, member)
end

-- The member leaves the unread zsets: 1 if it was unread (in them).
local function unread_drop(ib, member, cat)
  call("ZREM", ib.unread_keys[cat], member)
  return call("ZREM", ib.unread_all_key, member)
end
-- <<< unread zsets <<<
-- By month (yyyymm): the read, push and ever-read bitmaps passed are
-- ib.read, ib.push and ib.ever; ib.months lists the months in ARGV's order.

local function parse(member)
  local ref, cat, month, off = string.match(member, "^([^|]+)|([^|]+)|([^|]+)|([^|]+)$")
  return ref, cat, month, tonumber(off)
end

-- A member of all takes its other places: its category zset, its push bit
-- and, when its read bit is 0, the unread zsets and counter (its category's
-- zset and its month's bitmaps looked up in ib.category_keys, ib.push and ib.read).
-- A member still in its category zset: a fan-out evicted it and the rest of
-- its removal is pending (caps on write): it is still counted, so it is only
-- back in all (and moved to this time), not counted again.
local function place_evicted(ib, member, cat, month, off, time)
  call("SREM", ib.evicted_key, member)
  if call("ZSCORE", ib.unread_all_key, member) then unread_add(ib, member, cat, time) end
  bits_set(ib.forms, ib.push[month], off, 1)
end

local function place(ib, member, cat, month, off, time)
  if call("ZADD", ib.category_keys[cat], time, member) == 0 then
    place_evicted(ib, member, cat, month, off, time)
    return
  end
  bits_set(ib.forms, ib.push[month], off, 1)
  if bits_get(ib.forms, ib.read[month], off) == 0 then
    call("HINCRBY", ib.counters_key, cat, "1")
    unread_add(ib, member, cat, time)
  end
end

-- place() for many members at once (a fan-out's arrivals, a fill): the
-- category zsets, the unread zsets and the counters take each batch in one
-- variadic command, each month's bits one more (_bits_many.lua).
-- items: {member, cat, month, off, time} each, members distinct.
local function place_many(ib, items)
  local by_cat = {}
  for _, item in ipairs(items) do
    by_cat[item[2]] = by_cat[item[2]] or {}
    table.insert(by_cat[item[2]], item)
  end
  for cat, list in pairs(by_cat) do
    local members, scored = {}, {}
    for n, item in ipairs(list) do
      members[n] = item[1]
      scored[#scored + 1] = item[5]
      scored[#scored + 1] = item[1]
    end
    local held = call("ZMSCORE", ib.category_keys[cat], unpack(members))
    call("ZADD", ib.category_keys[cat], unpack(scored))
    local by_month = {}  -- month -> the items new to the category, and their offsets
    for n, item in ipairs(list) do
      if held[n] then
        place_evicted(ib, item[1], cat, item[3], item[4], item[5])
      else
        by_month[item[3]] = by_month[item[3]] or {{}, {}}
        table.insert(by_month[item[3]][1], item)
        table.insert(by_month[item[3]][2], item[4])
      end
    end
    local unread = {}
    for month, fresh in pairs(by_month) do
      bits_set_many(ib.forms, ib.push[month], fresh[2])
      for i, bit in ipairs(bits_get_many(ib.forms, ib.read[month], fresh[2])) do
        if bit == 0 then
          unread[#unread + 1] = fresh[1][i][5]
          unread[#unread + 1] = fresh[1][i][1]
        end
      end
    end
    if #unread > 0 then
      call("HINCRBY", ib.counters_key, cat, #unread / 2)
      call("ZADD", ib.unread_all_key, unpack(unread))
      call("ZADD", ib.unread_keys[cat], unpack(unread))
    end
  end
end

-- Put one item into the inbox named by the keys above: NX, so running a
-- merge twice changes nothing; hidden refs stay out; the unread counter
-- moves only when the read bit is 0. Time, offset and expiry go to Redis as
-- given. True if added. (A fan-out adds to all alone and leaves the rest to
-- place(), on the user's next read: deliver.lua.)
local function insert(ib, member, ref, cat, month, off, time, expire_ms, expiring)
  if call("SISMEMBER", ib.hidden_key, ref) == 1 then return false end
  if call("ZADD", ib.all_key, "NX", time, member) == 0 then return false end
  if expiring then call("ZADD", ib.expiry_key, expire_ms, member) end
  call("SADD", ib.months_key, month)
  place(ib, member, cat, month, off, time)
  return true
end
