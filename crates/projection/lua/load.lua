-- Reads the fields of SKU hashes that a batch's records need. It decides
-- nothing: the applier decides with the core's machine.
--
-- KEYS     the hashes to read
-- ARGV     per key, in order: a count, then that many field names
-- Returns per key the values of its fields, in order (nil for a field
-- the hash lacks). Fields are read a thousand at a time, within Lua's
-- limit on unpacked arguments.

local out = {}
local a = 1
for k = 1, #KEYS do
  local count = tonumber(ARGV[a])
  local values = {}
  for first = a + 1, a + count, 1000 do
    local last = math.min(first + 999, a + count)
    local got = redis.call('HMGET', KEYS[k], unpack(ARGV, first, last))
    for i = 1, last - first + 1 do
      values[#values + 1] = got[i]
    end
  end
  out[k] = values
  a = a + 1 + count
end
return out
