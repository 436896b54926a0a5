-- The write noted by write_begin.lua is done (its Redis half applied, or the
-- part recorded stale, or nothing committed): its note goes. A fill that
-- dropped the state hash meanwhile took the note with it (or carried it
-- over): the count only moves for a note that was there.
local state = KEYS[1]
if redis.call("HDEL", state, "w:" .. ARGV[1]) == 1 then
  if redis.call("HINCRBY", state, "w", -1) <= 0 then redis.call("HDEL", state, "w") end
end
return 1
