-- Records how far each partition of the command topic is folded into a
-- prefix: the furthest offset applied, which a redelivered or rewound
-- batch never lowers, so the marker says the same whatever the batches'
-- shape and a start can tell whether the broker still has that log.
--
-- KEYS[1]  the prefix's marker hash
-- ARGV     pairs of (field, offset): `applied:<partition>` and the last
--          offset a batch applied from that partition
for i = 1, #ARGV, 2 do
  local field, offset = ARGV[i], tonumber(ARGV[i + 1])
  local current = tonumber(redis.call('HGET', KEYS[1], field))
  if current == nil or current < offset then
    redis.call('HSET', KEYS[1], field, ARGV[i + 1])
  end
end
return 0
