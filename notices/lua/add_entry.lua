-- Adds one NEW announcement to a platform's built chunk indexes, without a
-- snapshot of PostgreSQL (readmodel.platform_add). Two ops, each on one slot:
--
-- 'rev'   KEYS[1] the platform revision; ARGV[2] ref, a revision the caller
--         took before its commit. Returns the new revision (ref + 1), or -1
--         (changing nothing) when a revision was taken since.
-- 'chunk' KEYS[1..3] one chunk's meta hash, index zset, expiry zset; ARGV[2]
--         ref, ARGV[3] new token, ARGV[4] id, ARGV[5] publish ms, ARGV[6]
--         expire ms or '', ARGV[7] now ms, ARGV[8] the new revision. Returns
--         1 when added, 0 (changing nothing) when the chunk is not built at ref.
--
-- The caller runs 'chunk' only after 'rev' succeeded. Why the ref: a rebuild
-- (sync_chunk.lua) takes its revision before it reads PostgreSQL, so one that
-- started after our commit may hold a newer state of this announcement
-- (edited or deleted since). Adding is only safe while no revision was taken
-- since the caller's ref (seen before its commit) and the chunk is built at
-- that revision (no rebuild half-written). The entry then goes in under the
-- new revision: an older rebuild still in flight is refused, a newer one read
-- PostgreSQL after our commit and holds the row. Any refusal makes the caller
-- run the full platform_sync. Expired entries are pruned as a rebuild would
-- (it keeps expire > now only).
local op = ARGV[1]
local ref = tonumber(ARGV[2])

if op == 'rev' then
  if tonumber(redis.call('GET', KEYS[1]) or '-1') ~= ref then
    return -1
  end
  return redis.call('INCR', KEYS[1])
end

local stored = redis.call('HGET', KEYS[1], 'rev')
if stored == false or tonumber(stored) ~= ref then
  return 0
end
local id, publish, expire, now = ARGV[4], ARGV[5], ARGV[6], ARGV[7]
local gone = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)
for i = 1, #gone, 1000 do
  local part = { unpack(gone, i, math.min(i + 999, #gone)) }
  redis.call('ZREM', KEYS[2], unpack(part))
  redis.call('ZREM', KEYS[3], unpack(part))
end
redis.call('ZADD', KEYS[2], publish, id)
if expire ~= '' then
  redis.call('ZADD', KEYS[3], expire, id)
end
redis.call('HSET', KEYS[1], 'rev', ARGV[8], 'token', ARGV[3])
return 1
