-- Write (or refresh) what the inbox shows of items (_detail.lua first).
-- KEYS: 1 item detail hash, 2 item detail version. ARGV: pairs of ref, item
-- JSON (one for a change; a batch of them when a rebuild restores details).

local detail_key, detail_version_key = KEYS[1], KEYS[2]
for i = 1, #ARGV, 2 do
  detail_put(detail_key, detail_version_key, ARGV[i], ARGV[i + 1])
end
return #ARGV / 2
