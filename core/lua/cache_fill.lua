-- Store a read-through entry the caller filled from PostgreSQL, if nothing
-- moved meanwhile (core/readthrough.py).
--
-- KEYS[1] the entry, KEYS[2] its fill lock.
-- ARGV[1] the caller's lock token; ARGV[2] "1" when the caller saw an entry
-- before reading PostgreSQL (ARGV[3] its bytes), "0" when it saw none;
-- ARGV[4] the new entry; ARGV[5] its lifetime in milliseconds.
-- Returns 1 when stored, 0 when not.
--
-- A lock that is no longer the caller's means its lease ran out: the fill
-- took too long and another may have taken over. An entry other than the one
-- the caller saw means an invalidation (a tombstone) or another fill landed
-- after the caller read PostgreSQL: its copy may predate the change, so it
-- is dropped. The lock is released either way when it is still the caller's.

if redis.call("GET", KEYS[2]) ~= ARGV[1] then
  return 0
end
redis.call("DEL", KEYS[2])
local current = redis.call("GET", KEYS[1])
if ARGV[2] == "1" then
  if current ~= ARGV[3] then
    return 0
  end
elseif current then
  return 0
end
redis.call("SET", KEYS[1], ARGV[4], "PX", ARGV[5])
return 1
