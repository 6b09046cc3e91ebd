-- sliding_window, one sub-window (limiter.SlidingWindow; sliding.go).
-- State: s1 = window index i, s2 = cur (hits in window i), s3 = prev (hits in
-- window i-1); one hash per counter with fields i, c and p (a missing c or p
-- is 0). e, the part of window i that has passed, is 0 when window i starts
-- later than now (the clock stepped back).

local function hashLoad(k, key)
  local v = redis.pcall('HMGET', key, 'i', 'c', 'p')
  if v.err then
    redis.call('DEL', key) -- not a hash
    o1[k], o2[k], o3[k], ox[k] = 0, 0, 0, false
    return
  elseif not v[1] then
    o1[k], o2[k], o3[k], ox[k] = 0, 0, 0, false
    return
  end
  local i, c, p = tonumber(v[1]), tonumber(v[2] or 0), tonumber(v[3] or 0)
  if not (i and c and p) or i ~= i or c ~= c or p ~= p then
    redis.call('DEL', key) -- not a counter's numbers
    o1[k], o2[k], o3[k], ox[k] = 0, 0, 0, false
    return
  end
  o1[k], o2[k], o3[k], ox[k] = i, c, p, true
end

-- hashSave writes (i, c, p) over the stored (oi, oc, op, exists): only the
-- fields that changed, then the TTL (HSET keeps an existing one); an empty
-- state is deleted. %d is exact below 2^63.
local function hashSave(key, i, c, p, ttl, oi, oc, op, exists)
  if c == 0 and p == 0 then
    if exists then
      redis.call('DEL', key)
    end
    return
  end
  local args = { 'HSET', key }
  if not exists or i ~= oi then
    args[#args + 1] = 'i'
    args[#args + 1] = fmt('%d', i)
  end
  if c ~= oc then
    args[#args + 1] = 'c'
    args[#args + 1] = fmt('%d', c)
  end
  if p ~= op then
    args[#args + 1] = 'p'
    args[#args + 1] = fmt('%d', p)
  end
  if #args > 2 then
    redis.call(unpack(args))
  end
  redis.call('PEXPIRE', key, fmt('%d', ttl))
end

-- roll: a state stored in a later window than now's (a failover to a host
-- whose clock is behind) is kept, seen from the start of its window.
local function swRoll(k)
  local i, c, p = o1[k], o2[k], o3[k]
  local idx = idiv(now, keyWindow[k])
  if i == idx or (i > idx and (c ~= 0 or p ~= 0)) then
    s1[k], s2[k], s3[k] = i, c, p
  elseif i == idx - 1 then
    s1[k], s2[k], s3[k] = idx, 0, c
  else
    s1[k], s2[k], s3[k] = idx, 0, 0
  end
end

-- decide: admit iff p*(W-E) + (c+n)*W <= L*W.
local function swDecide(k, h, n)
  local at, cur, prev, w, L = s1[k], s2[k], s3[k], keyWindow[k], hitCap[h] or hitLimit[h]
  local E = now - at * w
  if E < 0 then
    E = 0
  end
  local W, p = w, prev
  if p * (W - E) + (cur + n) * W <= L * W then
    return true, 0
  end
  if cur + n <= L and p > 0 then
    -- Still in this window: the first e' with p*(W-e') <= (L-c-n)*W.
    local need = W - floor(((L - cur) - n) * W / p)
    if need < W then
      return false, max(need - E, 1)
    end
  end
  -- In the next window c becomes p.
  local need = 0
  if cur > 0 then
    need = max(W - floor((L - n) * W / cur), 0)
  end
  return false, (w - E) + need
end

-- consume: cur grows by inc, saturating at MAX, then dec comes back where
-- the hits still count, the newest first: from cur, then from prev, never
-- below 0. The undo token is the window index and the hits added to cur; a
-- refund that reached prev adds the token (i - 1, what prev gained), which
-- an undo takes back from prev while the estimate counts it.
local function swConsume(k, inc, dec)
  local i, cur, prev = s1[k], s2[k], s3[k]
  local c = min(cur + inc, MAX)
  local back = min(dec, c)
  c = c - back
  local p = prev - min(dec - back, prev)
  if p ~= prev then
    nXU = nXU + 2
    XU[nXU - 1], XU[nXU] = i - 1, p - prev
  end
  s2[k], s3[k] = c, p
  return i, c - cur
end

-- report is remaining (floor(L - estimate), at least 0; computed only for an
-- allowed hit) and resetAfter.
local function swReport(k, h, allowed)
  local at, cur, prev, w, L = s1[k], s2[k], s3[k], keyWindow[k], hitCap[h] or hitLimit[h]
  local E = now - at * w
  if E < 0 then
    E = 0
  end
  local reset = 0
  if cur > 0 then
    reset = (w - E) + w
  elseif prev > 0 then
    reset = w - E
  end
  if not allowed then
    return 0, reset
  end
  local W = w
  local r = floor(((L * W - prev * (W - E)) - cur * W) / W)
  if r <= 0 then
    return 0, reset
  end
  return r, reset
end

-- store: the TTL is the end of window i+1, after which the counter is empty
-- (limiter's expires), at most two windows from now.
local function swStore(k, key)
  local i, c, p, oi, oc, op, exists, w = s1[k], s2[k], s3[k], o1[k], o2[k], o3[k], ox[k], keyWindow[k]
  if i == oi and c == oc and p == op and exists then
    return
  end
  local e = now - i * w
  if e < 0 then
    e = 0
  end
  hashSave(key, i, c, p, 2 * w - e, oi, oc, op, exists)
end

-- undo subtracts delta from c while the window index is unchanged, from p
-- once the window rolled once, and drops it after that (the counter no
-- longer holds it).
local function swUndo(k, idx, delta)
  local i = s1[k]
  if delta == 0 then
    return 0
  end
  if i == idx then
    s2[k] = min(max(s2[k] - delta, 0), MAX)
    return 1
  elseif i == idx + 1 then
    s3[k] = min(max(s3[k] - delta, 0), MAX)
    return 1
  end
  return 0
end


register('sliding_window', { load = hashLoad, roll = swRoll, decide = swDecide, consume = swConsume,
  report = swReport, store = swStore, undo = swUndo })
