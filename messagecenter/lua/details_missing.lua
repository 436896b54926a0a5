-- Which of these items have no detail: a user's fill after a loss loads only
-- those from PostgreSQL. KEYS: 1 item detail hash. ARGV: refs.
-- Returns the refs without a detail.

local detail_key = KEYS[1]
local missing = {}
for i = 1, #ARGV do
  if redis.call("HEXISTS", detail_key, ARGV[i]) == 0 then missing[#missing + 1] = ARGV[i] end
end
return missing
