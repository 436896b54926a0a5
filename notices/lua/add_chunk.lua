-- Adds one NEW announcement to one built chunk index of a platform, without
-- a snapshot of PostgreSQL (readmodel.platform_add), once add_revision.lua
-- moved the platform's revision from ref (each script on its own slot).
-- KEYS[1..3] the chunk's meta hash, index zset, expiry zset; ARGV[1] ref,
-- ARGV[2] new token, ARGV[3] id, ARGV[4] publish ms, ARGV[5] expire ms or
-- '', ARGV[6] now ms, ARGV[7] the new revision. Returns 1 when added, 0
-- (changing nothing) when the chunk is not built at ref.
--
-- The caller runs this only after add_revision.lua succeeded. Why the ref: a rebuild
-- (sync_chunk.lua) takes its revision before it reads PostgreSQL, so one that
-- started after our commit may hold a newer state of this announcement
-- (edited or deleted since). Adding is only safe while no revision was taken
-- since the caller's ref (seen before its commit) and the chunk is built at
-- that revision (no rebuild half-written). The entry then goes in under the
-- new revision: an older rebuild still in flight is refused, a newer one read
-- PostgreSQL after our commit and holds the row. Any refusal makes the caller
-- run the full platform_sync. Expired entries are pruned as a rebuild would
-- (it keeps expire > now only), but only those expired by the chunk time t
-- too: the read counters (live at t) never counted them, so no reader moves.
local ref = tonumber(ARGV[1])
local stored = redis.call('HGET', KEYS[1], 'rev')
if stored == false or tonumber(stored) ~= ref then
  return 0
end
local id, publish, expire, now = ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local t = redis.call('HGET', KEYS[1], 't')
if t and tonumber(t) < tonumber(now) then
  now = t
end
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
redis.call('HSET', KEYS[1], 'rev', ARGV[7], 'token', ARGV[2])
return 1
