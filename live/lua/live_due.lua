-- Publish the broadcast events whose time has come (a scheduled bulletin
-- reaching its display time, an announcement its publish time) and drop them.
-- Any process may run it (each stream-serving process's hub, and beat): the
-- script is atomic, so every due event is published once.
--
-- KEYS[1] the due zset (member "<channel>\n<event JSON>", score = when, ms).
-- ARGV[1] now (ms), ARGV[2] at most this many events per call.
-- Returns {published, the next due time in ms or false}.

local due = redis.call("ZRANGEBYSCORE", KEYS[1], "-inf", ARGV[1], "LIMIT", 0, tonumber(ARGV[2]))
for _, member in ipairs(due) do
  local cut = string.find(member, "\n", 1, true)
  if cut then
    redis.call("PUBLISH", string.sub(member, 1, cut - 1), string.sub(member, cut + 1))
  end
  redis.call("ZREM", KEYS[1], member)
end
local following = redis.call("ZRANGE", KEYS[1], 0, 0, "WITHSCORES")
return {#due, following[2] or false}
