-- fixed_window (limiter.FixedWindow; fixed.go): one 16-byte string per
-- counter, '<dd': i, the window index, and c, the count. A string, not a
-- hash, so that run reads it with the batch's one MGET and store writes it
-- and its TTL with one SET: one Redis command a decision instead of three
-- (HMGET, HSET, PEXPIRE). Its TTL is the end of window i.

local function fixedParse(k, v)
  if not v then
    o1[k], o2[k], o3[k], ox[k] = 0, 0, 0, false
    return
  elseif #v ~= 16 then
    o1[k], o2[k], o3[k], ox[k] = 0, 0, 0, true
    return
  end
  local i, c = sunpack('<dd', v)
  if i ~= i or c ~= c then
    o1[k], o2[k], o3[k], ox[k] = 0, 0, 0, true -- NaN: not a counter
    return
  end
  o1[k], o2[k], o3[k], ox[k] = i, c, 0, true
end

local function fixedLoad(k, key)
  fixedParse(k, redis.call('GET', key))
end

-- fixedRoll rolls key k to window idx (default: the window of now; a
-- calendar's roll passes its period's start).
local function fixedRoll(k, idx)
  local i, c = o1[k], o2[k]
  idx = idx or idiv(now, keyWindow[k])
  if i == idx or (i > idx and c ~= 0) then
    s1[k], s2[k], s3[k] = i, c, 0
  else
    s1[k], s2[k], s3[k] = idx, 0, 0
  end
end

local function fixedDecide(k, h, n)
  local at, w = s1[k], keyWindow[k]
  if s2[k] + n <= (hitCap[h] or hitLimit[h]) then
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
local function fixedConsume(k, inc, dec)
  local c0 = s2[k]
  local c = min(c0 + inc, MAX)
  if dec >= c then
    c = 0
  else
    c = c - dec
  end
  s2[k], s3[k] = c, 0
  return s1[k], c - c0
end

local function fixedReport(k, h, allowed)
  local at, c, w, L = s1[k], s2[k], keyWindow[k], hitCap[h] or hitLimit[h]
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
-- the calendar's store passes), else the end of window i of w ms.
local function fixedStore(k, key, ttl)
  local i, c, oi, oc, exists = s1[k], s2[k], o1[k], o2[k], ox[k]
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
  redis.call('SET', key, spack('<dd', i, c), 'PX', fmt('%d', ttl or (i + 1) * keyWindow[k] - now))
end

local function fixedUndo(k, idx, delta)
  if delta == 0 or s1[k] ~= idx then
    return 0
  end
  s2[k] = min(max(s2[k] - delta, 0), MAX)
  return 1
end

register('fixed_window', { load = fixedLoad, parse = fixedParse, roll = fixedRoll, decide = fixedDecide,
  consume = fixedConsume, report = fixedReport, store = fixedStore, undo = fixedUndo, fits = true,
  -- hit decides, consumes and reports a plain admitted hit h of n on key
  -- k in one function, returning remaining and reset as decide, consume
  -- and report give them, or nothing, having changed nothing, for a
  -- denial, a count at MAX or none (the general path's).
  hit = function(k, h, n)
    local t = s2[k] + n
    local L = hitCap[h] or hitLimit[h]
    if t > L or t > MAX or t == 0 then
      return nil
    end
    s2[k], dirty[k] = t, true
    local w = keyWindow[k]
    local e = now - s1[k] * w
    if e < 0 then
      e = 0
    end
    return L - t, w - e
  end })
