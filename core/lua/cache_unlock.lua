-- Release a read-through entry's fill lock if it is still the caller's
-- (core/readthrough.py: a fill whose database read failed). A lock whose
-- lease ran out may already be another filler's: it is left alone.
--
-- KEYS[1] the fill lock. ARGV[1] the caller's lock token.
-- Returns 1 when released, 0 when not.

if redis.call("GET", KEYS[1]) == ARGV[1] then
  return redis.call("DEL", KEYS[1])
end
return 0
