-- Applies a run of command records of ONE sku and ONE partition, in log
-- order, atomically.
--
-- The rules are those of stockledger_core::machine::SkuState::apply; every
-- reason string here appears there too, and the differential tests hold the
-- two to the same decisions and state.
--
-- KEYS[1] stock hash        available, total, partition (whose records
--                           built it), offset (last record applied there)
-- KEYS[2] orders hash       order id -> "D|quantity|offset" (deducted),
--                           "R|quantity|offset" (rolled back),
--                           "C|0|offset" (tombstone: rollback came first)
-- KEYS[3] adjustments hash  restock adjustment id -> offset that applied it
-- KEYS[4] decisions hash    offset -> "RESULT|delta|available|total|reason"
-- ARGV[1]                   the maximum stock level
-- ARGV[2]                   the partition the records are on
-- ARGV[3]                   the sku's home partition (murmur2 of the key):
--                           its owner until the stock hash names one
-- ARGV[4..]                 five per record: offset, kind (D, R or S),
--                           order or adjustment id, quantity, mode (ADD, SET
--                           or empty)
-- Returns one decision string per record.
--
-- Records on another partition than the sku's owner are MISROUTED: their
-- offsets mean nothing here, so they are neither applied nor stored.
-- A record at or below the stored offset is a redelivery: it is answered
-- with the decision stored for it and changes nothing.

local stock = redis.call('HMGET', KEYS[1], 'available', 'total', 'offset', 'partition')
local available = tonumber(stock[1]) or 0
local total = tonumber(stock[2]) or 0
local last = tonumber(stock[3])
local max_stock = tonumber(ARGV[1])
local partition = tonumber(ARGV[2])
local owner = tonumber(stock[4]) or tonumber(ARGV[3])
local changed = false

local function n(x)
  return string.format('%d', x)
end

if partition ~= owner then
  local d = 'MISROUTED|0|0|0|record is on partition ' .. n(partition) ..
    ' but the sku lives on partition ' .. n(owner) .. ' (produce with the murmur2 partitioner)'
  local out = {}
  for _ = 4, #ARGV, 5 do
    out[#out + 1] = d
  end
  return out
end

local function decide(result, delta, reason)
  return result .. '|' .. n(delta) .. '|' .. n(available) .. '|' .. n(total) .. '|' .. (reason or '')
end

local function deduct(offset, id, qty)
  local entry = redis.call('HGET', KEYS[2], id)
  if entry then
    local status = string.sub(entry, 1, 1)
    if status == 'D' then
      return decide('DUPLICATE', 0, 'order already deducted')
    elseif status == 'R' then
      return decide('REJECTED_CANCELLED', 0, 'order was rolled back')
    end
    return decide('REJECTED_CANCELLED', 0, 'order was cancelled before its deduction')
  end
  if qty > available then
    return decide('REJECTED_INSUFFICIENT', 0, 'requested ' .. n(qty) .. ', available ' .. n(available))
  end
  available = available - qty
  redis.call('HSET', KEYS[2], id, 'D|' .. n(qty) .. '|' .. offset)
  return decide('APPLIED', -qty)
end

local function rollback(offset, id)
  local entry = redis.call('HGET', KEYS[2], id)
  if not entry then
    redis.call('HSET', KEYS[2], id, 'C|0|' .. offset)
    return decide('IGNORED_NO_DEDUCTION', 0, 'no deduction for this order; tombstone left')
  end
  local status = string.sub(entry, 1, 1)
  if status == 'D' then
    local qty = tonumber(string.match(entry, '^D|(%d+)|'))
    available = available + qty
    redis.call('HSET', KEYS[2], id, 'R|' .. n(qty) .. '|' .. offset)
    return decide('APPLIED', qty)
  elseif status == 'R' then
    return decide('DUPLICATE', 0, 'order already rolled back')
  end
  return decide('DUPLICATE', 0, 'order already cancelled')
end

local function restock(offset, id, qty, mode)
  if redis.call('HEXISTS', KEYS[3], id) == 1 then
    return decide('DUPLICATE', 0, 'adjustment already applied')
  end
  local new_available, new_total
  if mode == 'ADD' then
    new_available = available + qty
    new_total = total + qty
    if new_available < 0 then
      return decide('REJECTED_RESTOCK', 0, 'ADD ' .. n(qty) .. ' would leave available at ' .. n(new_available))
    end
    if new_total > max_stock then
      return decide('REJECTED_RESTOCK', 0,
        'ADD ' .. n(qty) .. ' would make the total ' .. n(new_total) .. ', above ' .. n(max_stock))
    end
  else
    local held = total - available
    if qty < held then
      return decide('REJECTED_RESTOCK', 0, 'SET ' .. n(qty) .. ' is below the ' .. n(held) .. ' units held by orders')
    end
    new_available = qty - held
    new_total = qty
  end
  local delta = new_available - available
  available = new_available
  total = new_total
  redis.call('HSET', KEYS[3], id, offset)
  return decide('APPLIED', delta)
end

local out = {}
for i = 4, #ARGV, 5 do
  local offset = ARGV[i]
  local kind, id, qty, mode = ARGV[i + 1], ARGV[i + 2], tonumber(ARGV[i + 3]), ARGV[i + 4]
  local d
  if last and tonumber(offset) <= last then
    d = redis.call('HGET', KEYS[4], offset)
      or decide('DUPLICATE', 0, 'redelivered record; its first decision was pruned')
  else
    if kind == 'D' then
      d = deduct(offset, id, qty)
    elseif kind == 'R' then
      d = rollback(offset, id)
    else
      d = restock(offset, id, qty, mode)
    end
    redis.call('HSET', KEYS[4], offset, d)
    last = tonumber(offset)
    changed = true
  end
  out[#out + 1] = d
end
if changed then
  redis.call('HSET', KEYS[1], 'available', n(available), 'total', n(total),
    'partition', n(partition), 'offset', n(last))
end
return out
