-- A write of the user is about to commit in PostgreSQL: note it in the
-- user's state hash (KEYS[1]) until its Redis half is done (write_end.lua).
-- ARGV: token, start (ms), idle (ms). A checked call that finds it still
-- there after the grace takes the writer for dead and has the user filled
-- again (_inbox.lua, open_inbox). A state hash this creates (the user is not
-- filled) lives for the idle time, as a filled user's does.
local state = KEYS[1]
redis.call("HSET", state, "w:" .. ARGV[1], ARGV[2])
redis.call("HINCRBY", state, "w", 1)
if redis.call("PTTL", state) == -1 then redis.call("PEXPIRE", state, ARGV[3]) end
return 1
