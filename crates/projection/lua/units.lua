-- Reads every named unit of one SKU, in the order they were
-- added, with its state.
--
-- KEYS[1]  the SKU's orders hash (see src/encoding.rs): "{units}" lists the
--          names one per line, "{unit}" .. name holds each one's place and
--          state ("i|" available, "i|H" .. order held, "i|S" .. order
--          sold).
-- Returns name, field, name, field, ... (empty for a SKU without named
-- units). The fields are read a thousand at a time, so a SKU of any size
-- stays within Lua's limit on unpacked arguments.

local listed = redis.call('HGET', KEYS[1], '{units}')
if not listed then
  return {}
end
local names = {}
for name in string.gmatch(listed, '[^\n]+') do
  names[#names + 1] = name
end
local out = {}
for first = 1, #names, 1000 do
  local last = math.min(first + 999, #names)
  local fields = {}
  for i = first, last do
    fields[#fields + 1] = '{unit}' .. names[i]
  end
  local states = redis.call('HMGET', KEYS[1], unpack(fields))
  for i = first, last do
    out[#out + 1] = names[i]
    out[#out + 1] = states[i - first + 1] or ''
  end
end
return out
