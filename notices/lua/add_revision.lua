-- The first step of adding one NEW announcement to a platform's built chunk
-- indexes (readmodel.platform_add; add_chunk.lua is the second and says why
-- the revision guards it). KEYS[1] the platform revision; ARGV[1] ref, a
-- revision the caller took before its commit. Returns the new revision
-- (ref + 1), or -1 (changing nothing) when a revision was taken since.
if tonumber(redis.call('GET', KEYS[1]) or '-1') ~= tonumber(ARGV[1]) then
  return -1
end
return redis.call('INCR', KEYS[1])
