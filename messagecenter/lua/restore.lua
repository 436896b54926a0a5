-- Restore one user's committed read state from PostgreSQL (the user's fill,
-- before the items come back, so each lands read or unread as committed).
-- Every key carries the user's hash tag, so this runs on one Redis Cluster slot.
--
-- KEYS: 1 all-items zset, 2 unread counters hash, 3 state hash, then n read
-- bitmaps and n ever-read bitmaps, one per month listed in ARGV, last the
-- five unread zsets (all, then each category in the order of ARGV's end).
-- ARGV: 1 n, 2..1+n months (yyyymm), then n read bit-sets, n ever-read
-- bit-sets ("" = nothing to restore), then the seen watermark in ms ("" =
-- none), then each bit-set's form in the same order: "b" a bitmap string,
-- "s" offsets joined by "," written as a set (_bits.lua's sparse form), then
-- the four category names of the unread zsets.
-- Returns how many keys/fields were written.
--
-- A bit-set is written only where the key is missing (SET NX) and the
-- watermark only where the field is (HSETNX): a restore while the site serves
-- never undoes a newer mark. The inbox's invariant (_item.lua: counters[c] = members of
-- category c whose read bit is 0) must survive: items merged or delivered
-- before the restore were counted unread against a missing bitmap, so each
-- of them whose restored bit is 1 leaves its counter here, in the same step.

local month_count = tonumber(ARGV[1])
local restored = {}
local any = false
local written = 0
local forms = {}  -- the bit-sets' forms (_bits.lua)
local form_base = 2 + 3 * month_count

-- One bit-set where its key is missing; true if written.
local function put(key, data, form)
  if data == "" then return false end
  if form ~= "s" then return redis.call("SET", key, data, "NX") and true or false end
  if redis.call("EXISTS", key) == 1 then return false end
  local offsets = {}
  for o in string.gmatch(data, "[^,]+") do offsets[#offsets + 1] = o end
  redis.call("SADD", key, unpack(offsets))
  return true
end

for i = 1, month_count do
  local month = ARGV[1 + i]
  local read, ever = ARGV[1 + month_count + i], ARGV[1 + 2 * month_count + i]
  if put(KEYS[3 + i], read, ARGV[form_base + i]) then
    restored[month] = KEYS[3 + i]
    any = true
    written = written + 1
  end
  if put(KEYS[3 + month_count + i], ever, ARGV[form_base + month_count + i]) then
    written = written + 1
  end
end

-- The unread zsets (all, then by category) close KEYS: they hold exactly the
-- members counted unread, so only those are walked, and those read now leave
-- them with their counter.
local unread_all = KEYS[#KEYS - 4]
local unread_by_cat = {}
for i = 1, 4 do unread_by_cat[ARGV[form_base + 2 * month_count + i]] = KEYS[#KEYS - 4 + i] end
if any then
  for _, member in ipairs(redis.call("ZRANGE", unread_all, 0, -1)) do
    local ref, cat, month, off = string.match(member, "^([^|]+)|([^|]+)|([^|]+)|([^|]+)$")
    if ref and restored[month] and bits_get(forms, restored[month], tonumber(off)) == 1 then
      redis.call("HINCRBY", KEYS[2], cat, -1)
      redis.call("ZREM", unread_all, member)
      if unread_by_cat[cat] then redis.call("ZREM", unread_by_cat[cat], member) end
    end
  end
end

local seen = ARGV[2 + 3 * month_count]
if seen ~= "" and redis.call("HSETNX", KEYS[3], "seen", seen) == 1 then
  written = written + 1
end
-- Read flags or counts may have changed: cached pages are stale (the state hash's "rev", _item.lua).
if written > 0 then redis.call("HINCRBY", KEYS[3], "rev", 1) end
return written
