-- Moves a marked prefix's generation, which every write of a batch on a
-- single Redis must find as it was when the batch was read (see
-- write.lua): run in the same transaction as a rewrite of SKUs outside
-- the fold (a restore), so no write decided before it lands after it. An
-- unmarked prefix (being restored, or rebuilt) has no applier to fence.
--
-- KEYS[1]  the marker
-- Returns the new generation, or 0 when the prefix is not marked.

if redis.call('HEXISTS', KEYS[1], 'topic') == 0 then
  return 0
end
return redis.call('HINCRBY', KEYS[1], 'generation', 1)
