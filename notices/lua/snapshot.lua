-- The token and every entry of one (platform, chunk) index, read atomically
-- so the entries belong to the token.
-- KEYS[1] meta hash, KEYS[2] index zset (score = publish ms), KEYS[3] expiry zset.
-- Returns {} when the chunk was never built (the caller rebuilds it from
-- PostgreSQL), else {token, id, publish_ms, expire_ms or '', ...}.
local token = redis.call('HGET', KEYS[1], 'token')
if not token then
  return {}
end
local out = {token}
local entries = redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')
for i = 1, #entries, 2 do
  out[#out + 1] = entries[i]
  out[#out + 1] = entries[i + 1]
  out[#out + 1] = redis.call('ZSCORE', KEYS[3], entries[i]) or ''
end
return out
