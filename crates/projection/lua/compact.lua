-- Prunes one SKU's archived history older than the retention window.
--
-- KEYS[1] orders hash, KEYS[2] the decisions hash of earlier releases,
-- KEYS[3] stock hash, whose fields named by an offset are decisions (see
-- keys.rs)
-- ARGV[1] the newest offset whose record is both archived and older than
--         the retention window
-- Removes the decisions at or below that offset, and the orders whose final
-- state (rolled back, expired, or cancelled by a tombstone) was set at or
-- below it. Deducted, held and sold orders stay: a later rollback, confirm
-- or refund must still find them. Fields starting with a brace (users'
-- counters, named units) are never order entries, so they stay too.
-- Returns { orders removed, decisions removed }.

local cutoff = tonumber(ARGV[1])
local orders, decisions = 0, 0
local entries = redis.call('HGETALL', KEYS[1])
for i = 1, #entries, 2 do
  -- Fields starting with a brace (users' counters, named units and their
  -- list) are never orders: an order id cannot contain one.
  local status, offset
  if string.byte(entries[i]) ~= 123 then
    status, offset = string.match(entries[i + 1], '^([RCX])|%d+|(%d+)')
  end
  if status and tonumber(offset) <= cutoff then
    redis.call('HDEL', KEYS[1], entries[i])
    orders = orders + 1
  end
end
local offsets = redis.call('HKEYS', KEYS[2])
for _, offset in ipairs(offsets) do
  if tonumber(offset) <= cutoff then
    redis.call('HDEL', KEYS[2], offset)
    decisions = decisions + 1
  end
end
for _, field in ipairs(redis.call('HKEYS', KEYS[3])) do
  if string.match(field, '^%d+$') and tonumber(field) <= cutoff then
    redis.call('HDEL', KEYS[3], field)
    decisions = decisions + 1
  end
end
return { orders, decisions }
