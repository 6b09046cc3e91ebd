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

function CAL.roll(k)
  fixedRoll(k, CAL.start(keySubs[k]))
end

function CAL.decide(k, h, n)
  if s2[k] + n <= (hitCap[h] or hitLimit[h]) then
    return true, 0
  end
  return false, CAL.left(keySubs[k], s1[k])
end

function CAL.report(k, h, allowed)
  local c, L = s2[k], hitCap[h] or hitLimit[h]
  local reset = 0
  if c > 0 then
    reset = CAL.left(keySubs[k], s1[k])
  end
  if not allowed or c >= L then
    return 0, reset
  end
  return L - c, reset
end

-- store: fixedStore's, the TTL the end of the period.
function CAL.store(k, key)
  local i = s1[k]
  fixedStore(k, key, max(CAL.left(keySubs[k], i) + max(now, i) - now, 1))
end

end
