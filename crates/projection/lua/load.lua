-- Reads the fields of SKU hashes that a batch's records need, and, when
-- asked, a small hash whole. It decides nothing: the applier decides with
-- the core's machine.
--
-- KEYS     the hashes to read
-- ARGV[1]  the most fields a hash asked for whole may have to be read so
-- then per key, in order: '1' to read it whole too (if small enough) or
--          '0', a count, then that many field names
-- Returns one string, per key a list: its count of items and '#', then
-- each item as its length in bytes, ':' and its bytes, or '-' for a field
-- the hash lacks. A key's items are the values of its fields, in order,
-- followed, for a hash read whole, by '*' and its field, value pairs.
-- One string rather than nested replies: the applier reads it in one
-- pass. Fields are read a thousand at a time, within Lua's limit on
-- unpacked arguments.

local limit = tonumber(ARGV[1])
local out = {}
local function put(v)
  if v then
    out[#out + 1] = #v
    out[#out + 1] = ':'
    out[#out + 1] = v
  else
    out[#out + 1] = '-'
  end
end
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
  local all = nil
  if whole and redis.call('HLEN', KEYS[k]) <= limit then
    all = redis.call('HGETALL', KEYS[k])
  end
  out[#out + 1] = #values + (all and 1 + #all or 0)
  out[#out + 1] = '#'
  for i = 1, #values do
    put(values[i])
  end
  if all then
    put('*')
    for i = 1, #all do
      put(all[i])
    end
  end
  a = a + 2 + count
end
return table.concat(out)
