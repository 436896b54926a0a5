-- The expiry job for one user's notifications, bounded (the shared inbox
-- preambles come first). Own key: the user's notification zset (score =
-- expire_at ms). Expired notifications leave the inbox (counters kept
-- exact), then the zset. Returns {removed from the inbox, 1 if more expired
-- ones remain, left}.

local notifications_key = KEYS[12]
local limit = tonumber(ARGV[1])
local ib = open_inbox(1, 1, false)
if ib.not_open then return ib.not_open end

local rows = call("ZRANGEBYSCORE", notifications_key, "-inf", ib.now, "LIMIT", 0, limit)
local removed = 0
for _, member in ipairs(rows) do removed = removed + remove(ib, member) end
local more = 0
if #rows < limit then
  call("ZREMRANGEBYSCORE", notifications_key, "-inf", ib.now)
else
  call("ZREM", notifications_key, unpack(rows))
  more = 1
end
return {removed, more, call("ZCARD", notifications_key)}
