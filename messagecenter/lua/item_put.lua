-- Write (or refresh) what the inbox shows of an item (_detail.lua first).
-- KEYS: 1 item detail hash, 2 item detail version. ARGV: 1 ref, 2 item JSON.

local detail_key, detail_version_key = KEYS[1], KEYS[2]
detail_put(detail_key, detail_version_key, ARGV[1], ARGV[2])
return 1
