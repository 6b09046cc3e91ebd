-- fixed_window on a calendar (limiter.Limit.Calendar; calendar.go): the
-- fixed window's counter, its i the start of a calendar period (Unix ms)
-- instead of a window index. Go gives the starts of four periods around
-- its clock (fmtBound each, after the key's F_SPEC: limiter.Calendar.Bounds),
-- since Lua has no zone database; the script counts in the period that holds
-- its own clock, so every instance agrees whatever its clock. The state,
-- load, consume and undo are the fixed window's. The functions are fields
-- of the variant, CAL, a local of this block only: the script's main chunk
-- is at Lua's 200 locals.
register('fixed_window', { load = fixedLoad, parse = fixedParse, consume = fixedConsume, undo = fixedUndo }, 'cal')
do
local CAL = ALG[ALGORITHMS.fixed_window.number].cal
CAL.lease = false -- a lease's window cannot name a period

-- bounds reads a key's n period starts at p of the specs: the key's N.
function CAL.bounds(specs, p, n)
  local B = {}
  for j = 1, n do
    B[j], p = sunpack('<d', specs, p) -- fmtBound: not a prelude local, the chunk is at Lua's 200
  end
  return B, p
end

-- start is the start of the period holding now: the last bound at or
-- before it (the first, for a clock before them all).
function CAL.start(B)
  for j = #B - 1, 2, -1 do
    if now >= B[j] then
      return B[j]
    end
  end
  return B[1]
end

-- left is the time from now (no earlier than at) to the end of the
-- period starting at at: the next bound after it.
function CAL.left(B, at)
  local e = B[#B] + (B[#B] - B[#B - 1]) -- past the bounds: a clock far ahead
  for j = 1, #B do
    if B[j] > at then
      e = B[j]
      break
    end
  end
  return e - max(now, at)
end

function CAL.roll(i, c, _, _, B)
  local st = CAL.start(B)
  if i == st or (i > st and c ~= 0) then
    return i, c, 0
  end
  return st, 0, 0
end

function CAL.decide(at, c, _, _, L, n, _, B, C)
  if c + n <= (C or L) then
    return true, 0
  end
  return false, CAL.left(B, at)
end

function CAL.report(at, c, _, _, L, allowed, _, B, C)
  L = C or L
  local reset = 0
  if c > 0 then
    reset = CAL.left(B, at)
  end
  if not allowed or c >= L then
    return 0, reset
  end
  return L - c, reset
end

-- store: fixedStore's, the TTL the end of the period.
function CAL.store(key, _, B, i, c, _, oi, oc, _, exists)
  fixedStore(key, nil, nil, i, c, nil, oi, oc, nil, exists, nil, max(CAL.left(B, i) + max(now, i) - now, 1))
end

end
