-- Writes what the applier decided for a batch, fenced: it decides
-- nothing, and writes nothing for a SKU whose state is no longer the one
-- its decisions were taken on.
--
-- KEYS     per SKU, its stock, orders, adjustments and decisions hashes;
--          then, when ARGV[1] is '1', the prefix's marker
-- ARGV[1]  '1' when the last key is the marker
-- then per SKU:
--          the offset its stock hash must hold ('' for none: a SKU never
--          written), the fence: only the member that owns the SKU's
--          partition advances it, so a member that lost the partition, or
--          decided on state another writer has since changed, finds
--          another value there
--          then for each of its four hashes: a count and that many fields
--          to delete, then a count and that many field, value pairs to set
--          (in this order: a hash's layout follows the order its fields
--          were first written in, which the applier keeps in log order)
-- then     (field, offset) pairs for the marker, each never lowered,
--          recorded only when every SKU was written
-- Returns the SKUs (numbered from 1) whose stock hash no longer holds the
-- fence, nothing of theirs written; an empty list when all is written.

local marked = ARGV[1] == '1'
local skus = (#KEYS - (marked and 1 or 0)) / 4
local starts = {}
local moved = {}
local held = {}
local a = 2
for s = 1, skus do
  starts[s] = a
  local now = redis.call('HGET', KEYS[4 * s - 3], 'offset')
  held[s] = (now or '') == ARGV[a]
  if not held[s] then
    moved[#moved + 1] = s
  end
  a = a + 1
  for _ = 1, 4 do
    a = a + 1 + tonumber(ARGV[a])
    a = a + 1 + 2 * tonumber(ARGV[a])
  end
end

-- HDEL or HSET of ARGV[first..last] on `key`, in chunks within Lua's
-- limit on unpacked arguments (`step` is even for pairs).
local function chunked(command, key, first, last, step)
  for from = first, last, step do
    redis.call(command, key, unpack(ARGV, from, math.min(from + step - 1, last)))
  end
end

for s = 1, skus do
  a = starts[s] + 1
  for h = 1, held[s] and 4 or 0 do
    local key = KEYS[4 * s - 4 + h]
    local deletes = tonumber(ARGV[a])
    chunked('HDEL', key, a + 1, a + deletes, 1000)
    a = a + 1 + deletes
    local sets = tonumber(ARGV[a])
    chunked('HSET', key, a + 1, a + 2 * sets, 1000)
    a = a + 1 + 2 * sets
  end
end

if marked and #moved == 0 then
  local marker = KEYS[#KEYS]
  for i = a, #ARGV, 2 do
    local current = tonumber(redis.call('HGET', marker, ARGV[i]))
    if current == nil or current < tonumber(ARGV[i + 1]) then
      redis.call('HSET', marker, ARGV[i], ARGV[i + 1])
    end
  end
end
return moved
