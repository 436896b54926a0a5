-- The token and every id of one (platform, chunk) index, read atomically so
-- the id list belongs to the token.
-- KEYS[1] meta hash, KEYS[2] index zset.
-- Returns {} when the chunk was never built (the caller rebuilds it from
-- PostgreSQL), else {token, id, id, ...}.
local token = redis.call('HGET', KEYS[1], 'token')
if not token then
  return {}
end
local out = {token}
for _, id in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
  out[#out + 1] = id
end
return out
