-- Whether bit ARGV[1] (an item's offset) is set in KEYS[1], a month's
-- bit-set in either of its forms (_bits.lua): one reply per key, where a
-- GETBIT and a SISMEMBER sent blind cost two commands and a WRONGTYPE
-- refusal for the form the key is not in.
return bits_get({}, KEYS[1], tonumber(ARGV[1]))
