-- Set a user's bit in a day's activity bitmap, and give the bitmap its
-- expiry the first time (insight/activity.py): one round trip per user and day.
--
-- KEYS[1] the day's bitmap (of the user's chunk).
-- ARGV[1] the user's bit offset in the chunk; ARGV[2] the bitmap's lifetime (s).
-- Returns the bit's previous value.

local previous = redis.call("SETBIT", KEYS[1], ARGV[1], 1)
if redis.call("TTL", KEYS[1]) < 0 then
  redis.call("EXPIRE", KEYS[1], ARGV[2])
end
return previous
