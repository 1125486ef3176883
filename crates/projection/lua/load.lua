-- Reads the fields of SKU hashes that a batch's records need, and, when
-- asked, a small hash whole. It decides nothing: the applier decides with
-- the core's machine.
--
-- KEYS     the hashes to read
-- ARGV[1]  the most fields a hash asked for whole may have to be read so
-- then per key, in order: '1' to read it whole too (if small enough) or
--          '0', a count, then that many field names
-- Returns per key the values of its fields, in order (nil for a field
-- the hash lacks), followed, for a hash read whole, by '*' and its
-- field, value pairs. Fields are read a thousand at a time, within Lua's
-- limit on unpacked arguments.

local limit = tonumber(ARGV[1])
local out = {}
local a = 2
for k = 1, #KEYS do
  local whole = ARGV[a] == '1'
  local count = tonumber(ARGV[a + 1])
  local values = {}
  for first = a + 2, a + 1 + count, 1000 do
    local last = math.min(first + 999, a + 1 + count)
    local got = redis.call('HMGET', KEYS[k], unpack(ARGV, first, last))
    for i = 1, last - first + 1 do
      values[#values + 1] = got[i]
    end
  end
  if whole and redis.call('HLEN', KEYS[k]) <= limit then
    values[#values + 1] = '*'
    for _, item in ipairs(redis.call('HGETALL', KEYS[k])) do
      values[#values + 1] = item
    end
  end
  out[k] = values
  a = a + 2 + count
end
return out
