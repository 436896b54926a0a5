-- Bump one user's live version and tell the user's open pages, in one round
-- trip (the event carries the new version, so the two cannot be pipelined).
--
-- KEYS[1] the user's live version counter.
-- ARGV[1] the user's pub/sub channel ("" = no pub/sub: Redis Cluster, where
-- pages poll), ARGV[2] event head, ARGV[3] event tail (the event is
-- head .. version .. tail, see live/transport.py event_parts).
-- Returns the new version.

local version = redis.call("INCR", KEYS[1])
if ARGV[1] ~= "" then
  redis.call("PUBLISH", ARGV[1], ARGV[2] .. version .. ARGV[3])
end
return version
