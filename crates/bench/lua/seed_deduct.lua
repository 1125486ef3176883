-- Baseline for `stockledger bench` (redis-lua-direct): the seed-001 design,
-- every request one script call straight to Redis, with no log, order or
-- archive behind it.
--
-- KEYS[1] stock (a string counter), KEYS[2] history hash request id -> qty
-- ARGV[1] request id, ARGV[2] quantity
-- Returns 0 already deducted, 1 insufficient, 2 ok and now zero, 3 ok.
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 then
  return 0
end
local qty = tonumber(ARGV[2])
local stock = tonumber(redis.call('GET', KEYS[1]) or '0')
if stock < qty then
  return 1
end
local left = redis.call('DECRBY', KEYS[1], qty)
redis.call('HSET', KEYS[2], ARGV[1], qty)
if left == 0 then
  return 2
end
return 3
