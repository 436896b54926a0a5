-- Replaces one (platform, chunk) index with a snapshot of PostgreSQL, drops
-- the bitmaps of announcements that left the platform, and keeps the read
-- counters exact: every announcement whose liveness at the chunk time t the
-- change moves (removed, dropped, its times edited) moves its readers' counters.
--
-- KEYS[1] meta hash, KEYS[2] index zset, KEYS[3] expiry zset,
-- KEYS[4 .. 3 + nb] the chunk's counter blocks, then bitmaps (ids in ARGV).
-- ARGV[1] revision the snapshot was read at, ARGV[2] new token,
-- ARGV[3] '1' to refuse (-1, changing nothing) when the chunk was never built
-- (no chunk time: the caller restores its bitmaps and counts them, then calls
-- again with '0'),
-- ARGV[4] nb, ARGV[5] users per block, ARGV[6] the chunk time of a first
-- build, ARGV[7] n, then n triples (id, publish_ms, expire_ms or ''), then one
-- id per bitmap key, then the count of ids to drop and the ids, then (first
-- build) nb block values ('' for an empty block) counted at ARGV[6].
--
-- Snapshots race (two commits, one rebuild on a cold chunk); the revision
-- settles it: a snapshot only replaces an index built from an older revision,
-- and revisions are taken before PostgreSQL is read, so the newest one holds
-- every committed change.
-- Returns 1 (replaced), 0 (an index as new was there), -1 (refused, see
-- ARGV[3]) or -3 (changing nothing) when a bitmap it must read was not passed:
-- the caller passes the index's ids too and calls again.
if ARGV[3] == '1' and not redis.call('HGET', KEYS[1], 't') then
  return -1
end
local nb, size = tonumber(ARGV[4]), tonumber(ARGV[5])
local n = tonumber(ARGV[7])
local entries = {}
for i = 0, n - 1 do
  local base = 8 + i * 3
  entries[ARGV[base]] = { tonumber(ARGV[base + 1]), ARGV[base + 2] ~= '' and tonumber(ARGV[base + 2]) or nil }
end
local pos = 8 + n * 3
local bitmaps = {} -- id -> its position in KEYS
for i = 4 + nb, #KEYS do
  bitmaps[ARGV[pos]] = i
  pos = pos + 1
end
local drops = {}
for i = 1, tonumber(ARGV[pos]) do
  drops[ARGV[pos + i]] = true
end
pos = pos + tonumber(ARGV[pos]) + 1

local meta = redis.call('HMGET', KEYS[1], 'rev', 't')
local replace = tonumber(meta[1] or '-1') < tonumber(ARGV[1])
local t = tonumber(meta[2])
-- Plan first (reads only), so a missing bitmap key changes nothing.
local moves = {}
if t ~= nil then
  local old = redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')
  local expiries = {}
  local listed = redis.call('ZRANGE', KEYS[3], 0, -1, 'WITHSCORES')
  for i = 1, #listed, 2 do
    expiries[listed[i]] = tonumber(listed[i + 1])
  end
  local seen = {}
  for i = 1, #old, 2 do
    local id = old[i]
    seen[id] = true
    local was = notice_live(tonumber(old[i + 1]), expiries[id], t)
    local is = was
    if drops[id] then
      is = false
    elseif replace then
      local new = entries[id]
      is = new ~= nil and notice_live(new[1], new[2], t)
    end
    if was ~= is then
      moves[#moves + 1] = { id, is and 1 or -1 }
    end
  end
  if replace then
    -- Bits of an announcement entering the index (restored from a snapshot
    -- before it came back to the platform) count once it is live at t.
    for id, new in pairs(entries) do
      if not seen[id] and not drops[id] and notice_live(new[1], new[2], t) then
        moves[#moves + 1] = { id, 1 }
      end
    end
  end
end
for _, move in ipairs(moves) do
  if not bitmaps[move[1]] then
    return -3
  end
end
for _, move in ipairs(moves) do
  notice_add_readers(bitmaps[move[1]], 4, nb, size, move[2])
end
for id in pairs(drops) do
  if bitmaps[id] then
    redis.call('DEL', KEYS[bitmaps[id]])
  end
  redis.call('ZREM', KEYS[2], id)
  redis.call('ZREM', KEYS[3], id)
end
if t == nil and ARGV[pos] ~= nil then
  -- First build: the caller counted the restored bitmaps at ARGV[6] while no
  -- mark could move a counter (mark.lua needs the chunk time).
  redis.call('HSET', KEYS[1], 't', ARGV[6])
  for i = 1, nb do
    if ARGV[pos + i - 1] ~= '' then
      redis.call('SET', KEYS[3 + i], ARGV[pos + i - 1])
    else
      redis.call('DEL', KEYS[3 + i])
    end
  end
end
if not replace then
  return 0
end
redis.call('DEL', KEYS[2], KEYS[3])
for id, new in pairs(entries) do
  redis.call('ZADD', KEYS[2], new[1], id)
  if new[2] ~= nil then
    redis.call('ZADD', KEYS[3], new[2], id)
  end
end
redis.call('HSET', KEYS[1], 'rev', ARGV[1], 'token', ARGV[2])
return 1
