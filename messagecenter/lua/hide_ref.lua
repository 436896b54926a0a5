-- Rebuild/replay path: the ref is hidden for the user even if it is not
-- (yet) merged, so no later merge brings it in.
-- KEYS[1] the user's hidden set; ARGV[1] the ref.

local hidden_key = KEYS[1]
redis.call("SADD", hidden_key, ARGV[1])
return 1
