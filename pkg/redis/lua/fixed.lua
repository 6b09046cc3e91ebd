-- fixed_window (limiter.FixedWindow; fixed.go): one 16-byte string per
-- counter, '<dd': i, the window index, and c, the count. A string, not a
-- hash, so that run reads it with the batch's one MGET and store writes it
-- and its TTL with one SET: one Redis command a decision instead of three
-- (HMGET, HSET, PEXPIRE). Its TTL is the end of window i.

local function fixedParse(v)
  if not v then
    return 0, 0, 0, false
  elseif #v ~= 16 then
    return 0, 0, 0, true
  end
  local i, c = sunpack('<dd', v)
  if i ~= i or c ~= c then
    return 0, 0, 0, true -- NaN: not a counter
  end
  return i, c, 0, true
end

local function fixedLoad(key)
  return fixedParse(redis.call('GET', key))
end

local function fixedRoll(i, c, _, w)
  local idx = idiv(now, w)
  if i == idx or (i > idx and c ~= 0) then
    return i, c, 0
  end
  return idx, 0, 0
end

local function fixedDecide(at, c, _, w, L, n, _, _, C)
  if c + n <= (C or L) then
    return true, 0
  end
  local e = now - at * w
  if e < 0 then
    e = 0
  end
  return false, w - e
end

-- consume: the count grows by inc, saturating at MAX, then shrinks by dec,
-- never below 0. The undo token is the window index and the hits added.
local function fixedConsume(_, i, c0, _, _, _, inc, dec)
  local c = min(c0 + inc, MAX)
  if dec >= c then
    c = 0
  else
    c = c - dec
  end
  return i, c, 0, i, c - c0
end

local function fixedReport(at, c, _, w, L, allowed, _, _, C)
  L = C or L
  local reset = 0
  if c > 0 then
    local e = now - at * w
    if e < 0 then
      e = 0
    end
    reset = w - e
  end
  if not allowed or c >= L then
    return 0, reset
  end
  return L - c, reset
end

-- store: a count that changed in the stored window (a counter's count is
-- never 0: an empty one is deleted) is written in place, its 8 bytes, with
-- one SETRANGE: its TTL, the end of that window, stays as it is. A new
-- counter's TTL is ttl ms when given (a calendar period's end; it follows
-- the key index run.lua passes), else the end of window i of w ms.
local function fixedStore(key, w, _, i, c, _, oi, oc, _, exists, _, ttl)
  if i == oi and c == oc and exists then
    return
  elseif i == oi and oc > 0 and c > 0 then
    redis.call('SETRANGE', key, '8', spack('<d', c))
    return
  elseif c == 0 then
    if exists then
      redis.call('DEL', key)
    end
    return
  end
  redis.call('SET', key, spack('<dd', i, c), 'PX', fmt('%d', ttl or (i + 1) * w - now))
end

local function fixedUndo(_, i, c, p, _, _, idx, delta)
  if delta == 0 or i ~= idx then
    return i, c, p, 0
  end
  return i, min(max(c - delta, 0), MAX), p, 1
end

register('fixed_window', { load = fixedLoad, parse = fixedParse, roll = fixedRoll, decide = fixedDecide,
  consume = fixedConsume, report = fixedReport, store = fixedStore, undo = fixedUndo, fits = true,
  -- hit decides, consumes and reports a plain admitted hit of n on key k
  -- (limit L, or C for a pool's class) in one function, returning
  -- remaining and reset as decide, consume and report give them, or
  -- nothing, having changed nothing, for a denial, a count at MAX or none
  -- (the general path's).
  hit = function(k, L, n, _, C)
    local t = s2[k] + n
    L = C or L
    if t > L or t > MAX or t == 0 then
      return nil
    end
    s2[k], dirty[k] = t, true
    local w = KW[k]
    local e = now - s1[k] * w
    if e < 0 then
      e = 0
    end
    return L - t, w - e
  end })
