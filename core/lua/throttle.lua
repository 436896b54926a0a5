-- One request against a client's rate: the sliding window of DRF's
-- SimpleRateThrottle (at most ARGV[3] requests within any ARGV[2] ms), kept
-- as a sorted set of request times so that the check and the record are one
-- round trip and no request history travels over the wire.
--
-- KEYS[1] the client's request times (zset, score = time in ms).
-- ARGV[1] now (ms); ARGV[2] the window (ms); ARGV[3] requests allowed in it;
-- ARGV[4] a member unique to this request.
-- Returns {allowed (1/0), requests in the window before this one, the oldest
-- of them (ms, or -1 when none)}: what DRF's wait() needs on a refusal.

local now = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
-- A time at or before now - window has left the window (DRF pops those too).
redis.call("ZREMRANGEBYSCORE", KEYS[1], "-inf", now - window)
local count = redis.call("ZCARD", KEYS[1])
local oldest = -1
if count > 0 then
  oldest = tonumber(redis.call("ZRANGE", KEYS[1], 0, 0, "WITHSCORES")[2])
end
if count >= limit then
  return {0, count, oldest}
end
redis.call("ZADD", KEYS[1], now, ARGV[4])
redis.call("PEXPIRE", KEYS[1], window)
return {1, count, oldest}
