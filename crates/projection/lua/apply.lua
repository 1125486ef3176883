-- Applies runs of command records, each run of ONE sku and ONE partition,
-- in log order, atomically: the whole call is one script.
--
-- The rules are those of stockledger_core::machine::SkuState::apply; every
-- reason string here appears there too, and the differential tests hold the
-- two to the same decisions and state.
--
-- Run r (from 0) has the four keys KEYS[4r+1..4r+4] of its sku:
-- stock hash               available, total, reserved, partition (whose
--                          records built it), offset (last record applied
--                          there), named (1 when the sku sells named
--                          units, else 0 or absent), located (1 when
--                          the sku keeps stock by location, else 0 or
--                          absent), limit (units per user, when set),
--                          low (the low-stock threshold, when set)
-- orders hash              order id -> "STATUS|quantity|offset", or, when
--                          the order names a user, has a deadline or was
--                          refunded, "STATUS|quantity|offset|expires_at|
--                          refunded|user" (expires_at may be empty); an
--                          order of named units has that long form, then
--                          "\n" .. name for each unit it took; an order
--                          that took from a location has "\t" .. location
--                          after its first line.
--                          STATUS: D deducted, H held (reserved), S sold
--                          (confirmed), R rolled back, X expired, C
--                          tombstone (rollback came first).
--                          Also "{user}" .. user id -> units that user's
--                          live orders hold or bought (an order id cannot
--                          contain a brace, so the two never meet).
--                          Also "{unit}" .. name -> a named unit's place
--                          (from 0, in the order units were added) and
--                          state: "i|" available, "i|H" .. order held,
--                          "i|S" .. order sold; "{units}" -> every unit's
--                          name, one per line, in that order; and
--                          "{seatmap}" -> one letter per unit in that
--                          order, A available, H held, S sold (the seat
--                          map, read without a script).
--                          Also "{alerts}" -> the low-stock threshold,
--                          when set (the stock hash's `low` repeats it for
--                          the script; this one is what snapshots keep).
--                          Also "{locations}" -> the stock per location,
--                          a line "name|available|total" each, in the
--                          order they were first stocked.
-- adjustments hash         restock adjustment id -> offset that applied it
-- decisions hash           offset -> "RESULT|delta|available|total|reason",
--                          then "\t" .. location when the record named one
--                          or acted on one, then, when it caused stock
--                          events, "\t" .. one letter each (S sold out, B
--                          back in stock, L low stock; the location part
--                          is then present, empty if there is none)
-- ARGV[1]                  the maximum stock level
-- ARGV[2]                  the longest hold, in milliseconds
-- then per run:            the partition its records are on, the sku's home
--                          partition (murmur2 of the key: its owner until
--                          the stock hash names one), its record count, and
--                          its records. A record is its offset, its kind,
--                          then what that kind needs:
--                            D deduct   order id, quantity
--                            E deduct   time (ms), order id, quantity, user
--                                       id, expires_at (either may be
--                                       empty; at least one is not)
--                            R rollback order id
--                            N deduct   of named units: time, order id,
--                                       user id, expires_at (either may be
--                                       empty), the names one per line
--                            P deduct   from a named location: time, order
--                                       id, quantity, user id, expires_at
--                                       (either may be empty), location
--                            S restock  adjustment id, quantity, ADD or SET
--                            Q restock  of a location: adjustment id,
--                                       quantity, ADD or SET, location
--                            M transfer transfer id, from, to, quantity
--                            T restock  of named units: adjustment id, the
--                                       names one per line
--                            F confirm  time, order id
--                            U refund   order id, refund total (0 = all)
--                            X expire   time, order id
--                            L limit    units per user (0 = none)
--                            A alerts   low-stock threshold (0 = none)
-- Returns one decision string per record, runs one after another.
--
-- Records on another partition than the sku's owner are MISROUTED: their
-- offsets mean nothing here, so they are neither applied nor stored.
-- A record at or below the stored offset is a redelivery: it is answered
-- with the decision stored for it and changes nothing.
-- Deadlines are compared with record timestamps only: a confirm stamped at
-- the deadline is on time, an expire stamped at it is not due.

local max_stock = tonumber(ARGV[1])
local max_hold = tonumber(ARGV[2])
local USER = '{user}'
-- Arguments per record after its offset and kind.
local ARITY = { D = 2, E = 5, N = 5, P = 6, R = 1, S = 3, Q = 4, T = 2, M = 4, F = 2, U = 2, X = 2,
  L = 1, A = 1 }
local UNIT = '{unit}'
local UNITS = '{units}'
local SEATMAP = '{seatmap}'
local LOCATIONS = '{locations}'
local ALERTS = '{alerts}'
-- The keys of the run being applied, and its sku's state.
local STOCK, ORDERS, ADJUSTMENTS, DECISIONS
local available, total, reserved, limit, partition, named, located, low
-- Whether the run's stock hash has its fields (written before a limit or a
-- threshold is, so they come first in the hash, as when records are
-- applied one run each).
local fielded

-- Integers as text. Each value is formatted once per call: string.format
-- costs thousands of instructions, and a call repeats its quantities,
-- stock levels and totals many times over.
local texts = {}
local function n(x)
  local s = texts[x]
  if not s then
    s = string.format('%d', x)
    texts[x] = s
  end
  return s
end

-- A decision; `at`, when given, is the location it names or acted on.
local function decide(result, delta, reason, at)
  local d = result .. '|' .. n(delta) .. '|' .. n(available) .. '|' .. n(total) .. '|' .. (reason or '')
  if at then
    d = d .. '\t' .. at
  end
  return d
end

-- The stock per location, in the order they were first stocked.
local function read_places()
  local places = {}
  local text = redis.call('HGET', ORDERS, LOCATIONS)
  if text then
    for line in string.gmatch(text, '[^\n]+') do
      local name, a, t = string.match(line, '^(.*)|(%-?%d+)|(%-?%d+)$')
      places[#places + 1] = { name = name, a = tonumber(a), t = tonumber(t) }
    end
  end
  return places
end

local function write_places(places)
  local lines = {}
  for i, p in ipairs(places) do
    lines[i] = p.name .. '|' .. n(p.a) .. '|' .. n(p.t)
  end
  redis.call('HSET', ORDERS, LOCATIONS, table.concat(lines, '\n'))
end

local function find_place(places, name)
  for _, p in ipairs(places) do
    if p.name == name then
      return p
    end
  end
  return nil
end

-- Gives `units` back to location `at` (an order's), if there is one.
local function give_back(at, units)
  available = available + units
  if at and units ~= 0 then
    local places = read_places()
    local p = find_place(places, at)
    if p then
      p.a = p.a + units
      write_places(places)
    end
  end
end

local STATUS = { D = 'DEDUCTED', H = 'RESERVED', S = 'CONFIRMED', R = 'ROLLED_BACK', X = 'EXPIRED', C = 'CANCELLED' }

-- Names given one per line, as a list.
local function lines(text)
  local names = {}
  for name in string.gmatch(text, '[^\n]+') do
    names[#names + 1] = name
  end
  return names
end

-- The state of each of `names` ("" available, "H" or "S" and the
-- order; false for a unit the sku does not have), and its place.
local function unit_states(names)
  local fields = {}
  for i, name in ipairs(names) do
    fields[i] = UNIT .. name
  end
  local values = redis.call('HMGET', ORDERS, unpack(fields))
  local states, places = {}, {}
  for i = 1, #names do
    if values[i] then
      places[i], states[i] = string.match(values[i], '^(%d+)|(.*)$')
    else
      states[i] = false
    end
  end
  return states, places
end

-- Sets each of `names`, units the sku has, to `state`, in its field and
-- in the seat map; `places` are theirs, when the caller has read them.
local function mark(names, state, places)
  if not places then
    local _
    _, places = unit_states(names)
  end
  local map = redis.call('HGET', ORDERS, SEATMAP)
  local letter = string.sub(state, 1, 1)
  if letter == '' then
    letter = 'A'
  end
  for k, name in ipairs(names) do
    redis.call('HSET', ORDERS, UNIT .. name, places[k] .. '|' .. state)
    local i = tonumber(places[k])
    map = string.sub(map, 1, i) .. letter .. string.sub(map, i + 2)
  end
  redis.call('HSET', ORDERS, SEATMAP, map)
end

local function load(id)
  local entry = redis.call('HGET', ORDERS, id)
  if not entry then
    return nil
  end
  local units, loc
  local nl = string.find(entry, '\n', 1, true)
  if nl then
    units = lines(string.sub(entry, nl + 1))
    entry = string.sub(entry, 1, nl - 1)
  end
  local tab = string.find(entry, '\t', 1, true)
  if tab then
    loc = string.sub(entry, tab + 1)
    entry = string.sub(entry, 1, tab - 1)
  end
  local code, qty, offset, rest = string.match(entry, '^(%u)|(%d+)|(%d+)(.*)$')
  local e = { code = code, qty = tonumber(qty), offset = offset, refunded = 0, units = units, loc = loc }
  if rest ~= '' then
    local expires, refunded, user = string.match(rest, '^|(%-?%d*)|(%d+)|(.*)$')
    e.expires = tonumber(expires)
    e.refunded = tonumber(refunded)
    if user ~= '' then
      e.user = user
    end
  end
  return e
end

local function store(id, e)
  local s = e.code .. '|' .. n(e.qty) .. '|' .. e.offset
  if e.user or e.expires or e.refunded > 0 or e.units then
    s = s .. '|' .. (e.expires and n(e.expires) or '') .. '|' .. n(e.refunded) .. '|' .. (e.user or '')
  end
  if e.loc then
    s = s .. '\t' .. e.loc
  end
  if e.units then
    s = s .. '\n' .. table.concat(e.units, '\n')
  end
  redis.call('HSET', ORDERS, id, s)
end

local function counted(user)
  return tonumber(redis.call('HGET', ORDERS, USER .. user) or '0')
end

local function count(user, units)
  if not user then
    return
  end
  local c = counted(user) + units
  if c > 0 then
    redis.call('HSET', ORDERS, USER .. user, n(c))
  else
    redis.call('HDEL', ORDERS, USER .. user)
  end
end

local function live_units(e)
  if e.code == 'D' or e.code == 'H' then
    return e.qty
  elseif e.code == 'S' then
    return e.qty - e.refunded
  end
  return 0
end

-- Gives back what order `id` still holds or bought; its new status is
-- `code`, set at `offset`. Returns the units returned.
local function release(id, e, code, offset)
  local units = live_units(e)
  if e.code == 'H' then
    reserved = reserved - units
  end
  e.code = code
  e.offset = offset
  store(id, e)
  give_back(e.loc, units)
  count(e.user, -units)
  if units > 0 and e.units then
    mark(e.units, '')
  end
  return units
end

-- `at`: the location the deduct names, if any.
local function deduct(offset, time, id, qty, user, expires, units, at)
  if not (user or expires or limit or named or units or located or at) and qty <= available then
    -- Nothing but an earlier entry for the order could refuse this one,
    -- so claiming the id settles it in one call instead of a read and a
    -- write; a claimed id falls through to the checks below.
    if redis.call('HSETNX', ORDERS, id, 'D|' .. n(qty) .. '|' .. offset) == 1 then
      available = available - qty
      return decide('APPLIED', -qty)
    end
  end
  local e = load(id)
  if e then
    if e.code == 'D' then
      return decide('DUPLICATE', 0, 'order already deducted')
    elseif e.code == 'H' then
      return decide('DUPLICATE', 0, 'order already reserved')
    elseif e.code == 'S' then
      return decide('DUPLICATE', 0, 'order already confirmed')
    elseif e.code == 'R' then
      return decide('REJECTED_CANCELLED', 0, 'order was rolled back')
    elseif e.code == 'X' then
      return decide('REJECTED_EXPIRED', 0, "order's reservation expired")
    end
    return decide('REJECTED_CANCELLED', 0, 'order was cancelled before its deduction')
  end
  if expires then
    if expires <= time then
      return decide('REJECTED_DEADLINE', 0, 'expires_at: ' .. n(expires) ..
        ' is not after the time of the request (' .. n(time) .. ')')
    end
    if expires - time > max_hold then
      return decide('REJECTED_DEADLINE', 0, 'expires_at: ' .. n(expires) .. ' is more than ' ..
        n(max_hold) .. ' ms (7 days) after the time of the request (' .. n(time) .. ')')
    end
  end
  if named and not units then
    return decide('REJECTED_INSUFFICIENT', 0, 'the sku sells named units; name the units to take')
  end
  if units and not named and total > 0 then
    return decide('REJECTED_INSUFFICIENT', 0, 'the sku sells counted stock, not named units')
  end
  if limit then
    if not user then
      return decide('REJECTED_LIMIT', 0, 'the sku has a per-user limit of ' .. n(limit) .. '; name a user_id')
    end
    local c = counted(user)
    if c + qty > limit then
      return decide('REJECTED_LIMIT', 0, 'user ' .. user .. ' has ' .. n(c) .. ' of the per-user limit of ' ..
        n(limit) .. '; requested ' .. n(qty))
    end
  end
  local places, stock, place
  if units then
    local states
    states, places = unit_states(units)
    local taken = {}
    for i, name in ipairs(units) do
      local state = states[i]
      if not state then
        taken[#taken + 1] = name .. ' (not on sale)'
      elseif state ~= '' then
        if string.sub(state, 1, 1) == 'H' then
          taken[#taken + 1] = name .. ' (held)'
        else
          taken[#taken + 1] = name .. ' (sold)'
        end
      end
    end
    if #taken > 0 then
      return decide('REJECTED_INSUFFICIENT', 0, 'units not free: ' .. table.concat(taken, ', '))
    end
  elseif at then
    stock = read_places()
    place = find_place(stock, at)
    if not place then
      return decide('REJECTED_INSUFFICIENT', 0, 'unknown location: ' .. at)
    end
    if qty > place.a then
      return decide('REJECTED_INSUFFICIENT', 0, 'requested ' .. n(qty) .. ', available at ' .. at .. ' ' ..
        n(place.a))
    end
  elseif qty > available then
    return decide('REJECTED_INSUFFICIENT', 0, 'requested ' .. n(qty) .. ', available ' .. n(available))
  elseif located then
    -- The first location, in the order they were stocked, that has it all.
    stock = read_places()
    local each = {}
    for i, p in ipairs(stock) do
      if p.a >= qty then
        place = p
        break
      end
      each[i] = p.name .. ' ' .. n(p.a)
    end
    if not place then
      return decide('REJECTED_INSUFFICIENT', 0, 'requested ' .. n(qty) .. ', available ' .. n(available) ..
        ' but no one location has that many (' .. table.concat(each, ', ') .. ')')
    end
  end
  available = available - qty
  if place then
    place.a = place.a - qty
    write_places(stock)
  end
  local code = 'D'
  if expires then
    reserved = reserved + qty
    code = 'H'
  end
  count(user, qty)
  if units then
    -- Held by a reservation, sold by a plain deduct.
    mark(units, (code == 'H' and 'H' or 'S') .. id, places)
  end
  local loc = place and place.name
  store(id, { code = code, qty = qty, offset = offset, refunded = 0, user = user, expires = expires, units = units,
    loc = loc })
  return decide('APPLIED', -qty, nil, loc)
end

local function rollback(offset, id)
  local e = load(id)
  if not e then
    redis.call('HSET', ORDERS, id, 'C|0|' .. offset)
    return decide('IGNORED_NO_DEDUCTION', 0, 'no deduction for this order; tombstone left')
  end
  if e.code == 'D' or e.code == 'H' then
    return decide('APPLIED', release(id, e, 'R', offset), nil, e.loc)
  elseif e.code == 'R' then
    return decide('DUPLICATE', 0, 'order already rolled back')
  elseif e.code == 'C' then
    return decide('DUPLICATE', 0, 'order already cancelled')
  elseif e.code == 'X' then
    return decide('DUPLICATE', 0, "order's reservation already expired")
  end
  return decide('REJECTED_NOT_RESERVED', 0, 'order was confirmed; refund it instead')
end

local function confirm(offset, time, id)
  local e = load(id)
  if not e then
    return decide('REJECTED_NOT_RESERVED', 0, 'no reservation for this order')
  end
  if e.code == 'H' then
    if time > e.expires then
      local deadline = e.expires
      local units = release(id, e, 'X', offset)
      return decide('REJECTED_EXPIRED', units, 'confirmed at ' .. n(time) .. ', after the deadline ' ..
        n(deadline) .. '; the hold expired', e.loc)
    end
    reserved = reserved - e.qty
    e.code = 'S'
    e.offset = offset
    store(id, e)
    if e.units then
      mark(e.units, 'S' .. id)
    end
    return decide('CONFIRMED', 0, nil, e.loc)
  elseif e.code == 'S' then
    return decide('DUPLICATE', 0, 'order already confirmed')
  elseif e.code == 'X' then
    return decide('REJECTED_EXPIRED', 0, "order's reservation expired")
  elseif e.code == 'D' then
    return decide('REJECTED_NOT_RESERVED', 0, 'order was deducted without a hold; nothing to confirm')
  elseif e.code == 'R' then
    return decide('REJECTED_CANCELLED', 0, 'order was rolled back')
  end
  return decide('REJECTED_CANCELLED', 0, 'order was cancelled before its reservation')
end

local function expire(offset, time, id)
  local e = load(id)
  if not e then
    return decide('REJECTED_NOT_RESERVED', 0, 'no reservation for this order')
  end
  if e.code == 'H' then
    if time <= e.expires then
      return decide('IGNORED_NOT_DUE', 0, 'the hold lasts until ' .. n(e.expires) .. '; record time ' .. n(time))
    end
    return decide('EXPIRED', release(id, e, 'X', offset), nil, e.loc)
  elseif e.code == 'X' then
    return decide('DUPLICATE', 0, 'order already expired')
  end
  return decide('REJECTED_NOT_RESERVED', 0, 'no live hold for this order (it is ' .. STATUS[e.code] .. ')')
end

local function refund(offset, id, qty)
  local e = load(id)
  if not e then
    return decide('REJECTED_NOT_SOLD', 0, 'no sale for this order')
  elseif e.code == 'D' then
    return decide('REJECTED_NOT_SOLD', 0, 'order was deducted without a hold; roll it back instead')
  elseif e.code ~= 'S' then
    return decide('REJECTED_NOT_SOLD', 0, 'order sold nothing (it is ' .. STATUS[e.code] .. ')')
  end
  local target = e.qty
  if qty > 0 then
    target = qty
  end
  if target > e.qty then
    return decide('REJECTED_REFUND', 0, 'refund total ' .. n(target) .. ' is more than the ' .. n(e.qty) .. ' units bought')
  end
  if e.units and target ~= e.qty then
    return decide('REJECTED_REFUND', 0, 'an order of named units is refunded whole (' .. n(e.qty) ..
      ' units), not ' .. n(target))
  end
  if target < e.refunded then
    return decide('REJECTED_REFUND', 0, n(e.refunded) ..
      ' units are already refunded; a refund total cannot go down to ' .. n(target))
  end
  if target == e.refunded then
    return decide('DUPLICATE', 0, 'order already refunded ' .. n(e.refunded))
  end
  local units = target - e.refunded
  e.refunded = target
  e.offset = offset
  store(id, e)
  give_back(e.loc, units)
  count(e.user, -units)
  if e.units then
    mark(e.units, '')
  end
  return decide('REFUNDED', units, nil, e.loc)
end

-- A restock of the stock at location `at`; see SkuState::restock_at.
local function restock_at(offset, id, qty, mode, at)
  local places = read_places()
  local p = find_place(places, at)
  local was_a, was_t = 0, 0
  if p then
    was_a, was_t = p.a, p.t
  end
  local new_a, new_t
  if mode == 'ADD' then
    new_a = was_a + qty
    if new_a < 0 then
      return decide('REJECTED_RESTOCK', 0, 'ADD ' .. n(qty) .. ' would leave available at ' .. at .. ' at ' ..
        n(new_a))
    end
    new_t = was_t + qty
  else
    local held = was_t - was_a
    if qty < held then
      return decide('REJECTED_RESTOCK', 0, 'SET ' .. n(qty) .. ' is below the ' .. n(held) ..
        ' units held by orders at ' .. at)
    end
    new_a = qty - held
    new_t = qty
  end
  local sku_total = total + new_t - was_t
  if sku_total > max_stock then
    return decide('REJECTED_RESTOCK', 0, mode .. ' ' .. n(qty) .. ' would make the total ' .. n(sku_total) ..
      ', above ' .. n(max_stock))
  end
  local delta = new_a - was_a
  available = available + delta
  total = sku_total
  if p then
    p.a, p.t = new_a, new_t
  else
    places[#places + 1] = { name = at, a = new_a, t = new_t }
  end
  write_places(places)
  located = true
  redis.call('HSET', ADJUSTMENTS, id, offset)
  return decide('APPLIED', delta, nil, at)
end

local function restock(offset, id, qty, mode, units, at)
  if redis.call('HEXISTS', ADJUSTMENTS, id) == 1 then
    return decide('DUPLICATE', 0, 'adjustment already applied')
  end
  if named and not units then
    return decide('REJECTED_RESTOCK', 0, 'the sku sells named units; add them by name')
  end
  -- A sku keeps its stock in one implicit place or by location, never both.
  if located and not at then
    if units then
      return decide('REJECTED_RESTOCK', 0, 'the sku keeps stock by location; named units cannot be added to it')
    end
    return decide('REJECTED_RESTOCK', 0, 'the sku keeps stock by location; name the location')
  end
  if at and not located and total > 0 then
    return decide('REJECTED_RESTOCK', 0, 'the sku holds ' .. n(total) ..
      ' units in no location; stock by location starts from a total of 0')
  end
  if at then
    return restock_at(offset, id, qty, mode, at)
  end
  if units then
    if not named and total > 0 then
      return decide('REJECTED_RESTOCK', 0, 'the sku holds ' .. n(total) ..
        ' counted units; named units cannot be added to it')
    end
    local states = unit_states(units)
    local there = {}
    for i, name in ipairs(units) do
      if states[i] then
        there[#there + 1] = name
      end
    end
    if #there > 0 then
      return decide('REJECTED_RESTOCK', 0, 'units already there: ' .. table.concat(there, ', '))
    end
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
  redis.call('HSET', ADJUSTMENTS, id, offset)
  if units then
    local map = redis.call('HGET', ORDERS, SEATMAP) or ''
    for i, name in ipairs(units) do
      redis.call('HSET', ORDERS, UNIT .. name, n(#map + i - 1) .. '|')
    end
    local listed = redis.call('HGET', ORDERS, UNITS)
    local added = table.concat(units, '\n')
    if listed then
      added = listed .. '\n' .. added
    end
    redis.call('HSET', ORDERS, UNITS, added)
    redis.call('HSET', ORDERS, SEATMAP, map .. string.rep('A', #units))
    named = true
  end
  return decide('APPLIED', delta)
end

local function transfer(offset, id, from, to, qty)
  if redis.call('HEXISTS', ADJUSTMENTS, id) == 1 then
    return decide('DUPLICATE', 0, 'adjustment already applied')
  end
  local places = read_places()
  local src = find_place(places, from)
  if not src then
    return decide('REJECTED_INSUFFICIENT', 0, 'unknown location: ' .. from)
  end
  if qty > src.a then
    return decide('REJECTED_INSUFFICIENT', 0, 'requested ' .. n(qty) .. ', available at ' .. from .. ' ' ..
      n(src.a))
  end
  src.a = src.a - qty
  src.t = src.t - qty
  local dst = find_place(places, to)
  if not dst then
    dst = { name = to, a = 0, t = 0 }
    places[#places + 1] = dst
  end
  dst.a = dst.a + qty
  dst.t = dst.t + qty
  write_places(places)
  redis.call('HSET', ADJUSTMENTS, id, offset)
  return decide('APPLIED', 0, nil, from)
end

-- Writes the stock hash's fields once, if the sku had none: before the
-- first field written as decided, so the layout does not depend on how
-- records were batched.
local function ensure_fields(offset)
  if not fielded then
    redis.call('HSET', STOCK, 'available', n(available), 'total', n(total), 'reserved', n(reserved),
      'partition', n(partition), 'offset', offset, 'named', named and '1' or '0', 'located',
      located and '1' or '0')
    fielded = true
  end
end

-- `d` with the stock events of available going from `before` to where
-- it is now, as StockEvents::between decides them.
local function with_events(d, before)
  local ev = ''
  if before > 0 and available == 0 then
    ev = ev .. 'S'
  end
  if before == 0 and available > 0 then
    ev = ev .. 'B'
  end
  if low and before >= low and available < low then
    ev = ev .. 'L'
  end
  if ev == '' then
    return d
  end
  if not string.find(d, '\t', 1, true) then
    d = d .. '\t'
  end
  return d .. '\t' .. ev
end

-- `d` naming location `at` when it names none yet: a refusal names the
-- location the record named, as SkuState::apply does.
local function naming(d, at)
  if string.find(d, '\t', 1, true) then
    return d
  end
  return d .. '\t' .. at
end

local out = {}
local a = 3
local r = 0
while a <= #ARGV do
  STOCK, ORDERS, ADJUSTMENTS, DECISIONS = KEYS[4 * r + 1], KEYS[4 * r + 2], KEYS[4 * r + 3], KEYS[4 * r + 4]
  r = r + 1
  partition = tonumber(ARGV[a])
  local home, count = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  a = a + 3
  local stock = redis.call('HMGET', STOCK, 'available', 'total', 'offset', 'partition', 'reserved', 'limit',
    'named', 'located', 'low')
  local owner = tonumber(stock[4]) or home
  if partition ~= owner then
    local d = 'MISROUTED|0|0|0|record is on partition ' .. n(partition) ..
      ' but the sku lives on partition ' .. n(owner) .. ' (produce with the murmur2 partitioner)'
    for _ = 1, count do
      out[#out + 1] = d
      a = a + 2 + ARITY[ARGV[a + 1]]
    end
  else
    -- What the hash holds (nil for a field it lacks), to write only what changed.
    local was_total, was_reserved = tonumber(stock[2]), tonumber(stock[5])
    available = tonumber(stock[1]) or 0
    total = was_total or 0
    reserved = was_reserved or 0
    limit = tonumber(stock[6])
    named = stock[7] == '1'
    located = stock[8] == '1'
    low = tonumber(stock[9])
    fielded = stock[4] and true or false
    local was_named, was_located = named, located
    local last = tonumber(stock[3])
    local last_text = stock[3]
    local changed = false
    for _ = 1, count do
      local offset, kind = ARGV[a], ARGV[a + 1]
      local d
      if last and tonumber(offset) <= last then
        d = redis.call('HGET', DECISIONS, offset)
          or decide('DUPLICATE', 0, 'redelivered record; its first decision was pruned')
      else
        local before = available
        if kind == 'D' then
          d = deduct(offset, nil, ARGV[a + 2], tonumber(ARGV[a + 3]), nil, nil)
        elseif kind == 'E' then
          local user = ARGV[a + 5]
          if user == '' then
            user = nil
          end
          d = deduct(offset, tonumber(ARGV[a + 2]), ARGV[a + 3], tonumber(ARGV[a + 4]), user,
            tonumber(ARGV[a + 6]))
        elseif kind == 'N' then
          local user = ARGV[a + 4]
          if user == '' then
            user = nil
          end
          local units = lines(ARGV[a + 6])
          d = deduct(offset, tonumber(ARGV[a + 2]), ARGV[a + 3], #units, user, tonumber(ARGV[a + 5]), units)
        elseif kind == 'P' then
          local user = ARGV[a + 5]
          if user == '' then
            user = nil
          end
          local at = ARGV[a + 7]
          d = naming(deduct(offset, tonumber(ARGV[a + 2]), ARGV[a + 3], tonumber(ARGV[a + 4]), user,
            tonumber(ARGV[a + 6]), nil, at), at)
        elseif kind == 'Q' then
          local at = ARGV[a + 5]
          d = naming(restock(offset, ARGV[a + 2], tonumber(ARGV[a + 3]), ARGV[a + 4], nil, at), at)
        elseif kind == 'M' then
          d = naming(transfer(offset, ARGV[a + 2], ARGV[a + 3], ARGV[a + 4], tonumber(ARGV[a + 5])), ARGV[a + 3])
        elseif kind == 'T' then
          local units = lines(ARGV[a + 3])
          d = restock(offset, ARGV[a + 2], #units, 'ADD', units)
        elseif kind == 'R' then
          d = rollback(offset, ARGV[a + 2])
        elseif kind == 'S' then
          d = restock(offset, ARGV[a + 2], tonumber(ARGV[a + 3]), ARGV[a + 4])
        elseif kind == 'F' then
          d = confirm(offset, tonumber(ARGV[a + 2]), ARGV[a + 3])
        elseif kind == 'U' then
          d = refund(offset, ARGV[a + 2], tonumber(ARGV[a + 3]))
        elseif kind == 'X' then
          d = expire(offset, tonumber(ARGV[a + 2]), ARGV[a + 3])
        elseif kind == 'A' then
          -- Written as decided, as the limit is (see below).
          local qty = tonumber(ARGV[a + 2])
          ensure_fields(offset)
          if qty > 0 then
            low = qty
            redis.call('HSET', STOCK, 'low', n(qty))
            redis.call('HSET', ORDERS, ALERTS, n(qty))
          else
            low = nil
            redis.call('HDEL', STOCK, 'low')
            redis.call('HDEL', ORDERS, ALERTS)
          end
          d = decide('APPLIED', 0)
        else
          -- Written as decided: a hash's layout follows the order its
          -- fields were first written in, and the limit and the threshold
          -- must be first written in log order however records are batched.
          local qty = tonumber(ARGV[a + 2])
          ensure_fields(offset)
          if qty > 0 then
            limit = qty
            redis.call('HSET', STOCK, 'limit', n(qty))
          else
            limit = nil
            redis.call('HDEL', STOCK, 'limit')
          end
          d = decide('APPLIED', 0)
        end
        d = with_events(d, before)
        -- One field at a time, as the record is decided: a hash's layout
        -- (what DUMP gives) then depends only on the log, however the
        -- records were cut into batches.
        redis.call('HSET', DECISIONS, offset, d)
        last = tonumber(offset)
        last_text = offset
        changed = true
      end
      out[#out + 1] = d
      a = a + 2 + ARITY[kind]
    end
    if changed then
      if total == was_total and reserved == was_reserved and named == was_named and located == was_located
        and stock[4] then
        -- Most runs change only these two. Writing the others again with
        -- their old values would leave the hash's bytes as they are.
        redis.call('HSET', STOCK, 'available', n(available), 'offset', last_text)
      else
        -- `named` is written here, with the others, from a SKU's first
        -- record on: a hash's layout follows the order its fields were
        -- first written in, and this keeps it the same however the records
        -- were cut into batches. (It changes with the total, but a total
        -- set to 0 and named units added in one run end where it began.)
        redis.call('HSET', STOCK, 'available', n(available), 'total', n(total), 'reserved', n(reserved),
          'partition', n(partition), 'offset', last_text, 'named', named and '1' or '0', 'located',
          located and '1' or '0')
      end
    end
  end
end
return out
