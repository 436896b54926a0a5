-- Replaces one (platform, chunk) index with a snapshot of PostgreSQL and drops
-- the bitmaps of announcements that left the platform.
--
-- KEYS[1] meta hash, KEYS[2] index zset, KEYS[3] expiry zset,
-- KEYS[4..] bitmaps to delete.
-- ARGV[1] revision the snapshot was read at, ARGV[2] new token,
-- ARGV[3] '1' to refuse (-1, changing nothing) when the chunk was never built
-- (no meta: the caller restores its bitmaps first, then calls again with '0'),
-- ARGV[4] n, then n triples (id, publish_ms, expire_ms or '').
--
-- Snapshots race (two commits, one rebuild on a cold chunk); the revision
-- settles it: a snapshot only replaces an index built from an older revision,
-- and revisions are taken before PostgreSQL is read, so the newest one holds
-- every committed change.
if ARGV[3] == '1' and redis.call('EXISTS', KEYS[1]) == 0 then
  return -1
end
for i = 4, #KEYS do
  redis.call('DEL', KEYS[i])
end
local stored = tonumber(redis.call('HGET', KEYS[1], 'rev') or '-1')
if stored >= tonumber(ARGV[1]) then
  return 0
end
redis.call('DEL', KEYS[2], KEYS[3])
local announcement_count = tonumber(ARGV[4])
for i = 0, announcement_count - 1 do
  local base = 5 + i * 3
  redis.call('ZADD', KEYS[2], ARGV[base + 1], ARGV[base])
  if ARGV[base + 2] ~= '' then
    redis.call('ZADD', KEYS[3], ARGV[base + 2], ARGV[base])
  end
end
redis.call('HSET', KEYS[1], 'rev', ARGV[1], 'token', ARGV[2])
return 1
