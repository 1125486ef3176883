-- Swaps one SKU's rebuilt state in for its live state, atomically.
--
-- KEYS[1..4]   live keys      (stock, orders, adjustments, decisions)
-- KEYS[5..8]   rebuilt keys   (same order)
-- KEYS[9..12]  where the replaced live keys go (ignored when dropping)
-- KEYS[13]     the live prefix's marker, on a single Redis: when the
--              prefix is marked (an applier may fold it), its generation
--              moves with the swap, so a write the applier decided on the
--              state swapped out does not land after it
-- ARGV[1]      '1' to delete the replaced live keys instead of keeping them
-- Returns 1 when swapped, 0 when the rebuilt state is behind the live one
-- (the applier applied records the replay has not reached yet: catch up
-- and try again). All keys share the SKU's hash tag.

local live = tonumber(redis.call('HGET', KEYS[1], 'offset') or '-1')
local rebuilt = tonumber(redis.call('HGET', KEYS[5], 'offset') or '-1')
if rebuilt < live then
  return 0
end
for i = 1, 4 do
  if redis.call('EXISTS', KEYS[i]) == 1 then
    if ARGV[1] == '1' then
      redis.call('DEL', KEYS[i])
    else
      redis.call('RENAME', KEYS[i], KEYS[i + 8])
    end
  end
  if redis.call('EXISTS', KEYS[i + 4]) == 1 then
    redis.call('RENAME', KEYS[i + 4], KEYS[i])
  end
end
if KEYS[13] and redis.call('HEXISTS', KEYS[13], 'topic') == 1 then
  redis.call('HINCRBY', KEYS[13], 'generation', 1)
end
return 1
