-- Writes what the applier decided for a batch on a Redis Cluster, fenced
-- per SKU: it decides nothing, and writes nothing for a SKU whose state is
-- no longer the one its decisions were taken on. (A single Redis fences a
-- whole batch through the marker in a transaction instead, and runs no
-- script: see fence.rs.) Also records marks alone, unfenced.
--
-- KEYS     per SKU, its stock (which holds its decisions too), orders and
--          adjustments hashes; then, when ARGV[1] is 'none', the prefix's
--          marker
-- ARGV[1]  the fence:
--          'sku': each SKU below starts with the offset its stock hash
--            must hold ('' for a SKU never written); a SKU whose hash
--            holds another is not written, and its number (from 1) is in
--            the reply. There is no marker: a cluster keeps it on another
--            slot.
--          'none': no SKU, and no fence: the marker's marks alone
-- then per SKU: its fence, then for each of its three hashes a count and
--          that many fields to delete, then a count and that many field,
--          value pairs to set (in this order: a hash's layout follows the
--          order its fields were first written in, which the applier keeps
--          in log order)
-- then     (field, offset) pairs for the marker, each never lowered
-- Returns an empty list when everything was written.

local marked = ARGV[1] == 'none'
local skus = (#KEYS - (marked and 1 or 0)) / 3
local a = 2

local starts = {}
local moved = {}
local held = {}
for s = 1, skus do
  local now = redis.call('HGET', KEYS[3 * s - 2], 'offset')
  held[s] = (now or '') == ARGV[a]
  if not held[s] then
    moved[#moved + 1] = s
  end
  a = a + 1
  starts[s] = a
  for _ = 1, 3 do
    a = a + 1 + tonumber(ARGV[a])
    a = a + 1 + 2 * tonumber(ARGV[a])
  end
end
local marks = a

-- HDEL or HSET of ARGV[first..last] on `key`, in chunks within Lua's
-- limit on unpacked arguments (`step` is even for pairs).
local function chunked(command, key, first, last, step)
  for from = first, last, step do
    redis.call(command, key, unpack(ARGV, from, math.min(from + step - 1, last)))
  end
end

for s = 1, skus do
  a = starts[s]
  for h = 1, held[s] and 3 or 0 do
    local key = KEYS[3 * s - 3 + h]
    local deletes = tonumber(ARGV[a])
    chunked('HDEL', key, a + 1, a + deletes, 1000)
    a = a + 1 + deletes
    local sets = tonumber(ARGV[a])
    chunked('HSET', key, a + 1, a + 2 * sets, 1000)
    a = a + 1 + 2 * sets
  end
end

if marked then
  local marker = KEYS[#KEYS]
  for i = marks, #ARGV, 2 do
    local current = tonumber(redis.call('HGET', marker, ARGV[i]))
    if current == nil or current < tonumber(ARGV[i + 1]) then
      redis.call('HSET', marker, ARGV[i], ARGV[i + 1])
    end
  end
end
return moved
