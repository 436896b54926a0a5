-- The user has seen everything up to now (the shared inbox preambles
-- come first): the seen watermark, a time on the score axis, moves to now,
-- or to the newest item's time if that is later (an item timed ahead of the
-- clock is seen too).

local ib = open_inbox(0, 0, false)
if ib.not_open then return ib.not_open end

local top = call("ZREVRANGE", ib.all_key, 0, 0, "WITHSCORES")
local seen_time = ib.now
if #top == 2 and tonumber(top[2]) > seen_time then seen_time = tonumber(top[2]) end
call("HSET", ib.state_key, "seen", string.format("%d", seen_time))
touch(ib)
return 1
