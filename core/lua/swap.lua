-- Replace a string only if it still holds what the caller read (compare and
-- set): a process that decided from a value must not overwrite what another
-- wrote since (durability.healing: the generation marker).
--
-- KEYS[1] the string. ARGV[1] the value read, ARGV[2] the new value.
-- Returns 1 when replaced, 0 when the value had changed.

if redis.call("GET", KEYS[1]) == ARGV[1] then
  redis.call("SET", KEYS[1], ARGV[2])
  return 1
end
return 0
