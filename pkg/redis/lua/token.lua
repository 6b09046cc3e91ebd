-- token_bucket (limiter.TokenBucket; token.go): GCRA. One 24-byte string
-- per counter, '<ddd': t, f and d, the theoretical arrival time TAT = t + f/d
-- ms (a string, as fixed_window's, for the batch's MGET and one SET). With
-- g = gcd(L, w), rp = L/g and wp = w/g, a token is wp ticks of 1/rp ms;
-- every number stays a whole double below 2^53 (the Go twin's Validate), so
-- both twins compute the same integers. Its state needs no roll.

-- The third, B*wp, is of a class's capacity C instead of the burst when
-- given (decide and report of a pool's class): refill (rp, wp) stays the
-- pool's.
local function tokenParams(w, L, B, C)
  if L == 0 then
    return 0, 1, 0
  end
  local a, b = L, w
  while b ~= 0 do
    a, b = b, a % b
  end
  if B == 0 then
    B = L
  end
  return L / a, w / a, (C or B) * (w / a)
end

-- tokenDebt is the debt at now in ticks: 0 for a full bucket, at most MAX.
local function tokenDebt(t, f, d, rp)
  local dt = t - now
  if dt < 0 or rp == 0 then
    return 0
  end
  if d ~= rp and f ~= 0 then
    f = math.ceil(f * rp / d)
  end
  if dt * rp > MAX then
    return MAX
  end
  return min(dt * rp + f, MAX)
end

-- tokenReset is the whole milliseconds until a debt D (rp a millisecond)
-- is paid: D / rp rounded up, 0 with no debt.
local function tokenReset(D, rp)
  if D <= 0 then
    return 0
  end
  local r = idiv(D, rp)
  if r * rp < D then
    return r + 1
  end
  return r
end

local function tokenParse(k, v)
  if not v then
    o1[k], o2[k], o3[k], ox[k] = 0, 0, 0, false
    return
  elseif #v ~= 24 then
    o1[k], o2[k], o3[k], ox[k] = 0, 0, 0, true
    return
  end
  local t, f, d = sunpack('<ddd', v)
  if t ~= t or f ~= f or d ~= d then
    o1[k], o2[k], o3[k], ox[k] = 0, 0, 0, true -- NaN: not a counter
    return
  end
  o1[k], o2[k], o3[k], ox[k] = t, f, d, true
end

local function tokenLoad(k, key)
  tokenParse(k, redis.call('GET', key))
end

local function tokenRoll(k)
  s1[k], s2[k], s3[k] = o1[k], o2[k], o3[k]
end

local function tokenDecide(k, h, n)
  local w = keyWindow[k]
  local rp, wp, bw = tokenParams(w, hitLimit[h], hitBurst[h], hitCap[h])
  local need = tokenDebt(s1[k], s2[k], s3[k], rp) + n * wp
  if need <= bw then
    return true, 0
  end
  if rp == 0 then
    return false, w
  end
  local a = need - bw
  local q = idiv(a, rp)
  if q * rp < a then
    q = q + 1
  end
  return false, q
end

-- tokenState is the state of debt D (ticks): TAT = now + D/rp, or 0, 0, 0
-- for a full bucket (the Go twin's consume).
local function tokenState(D, rp)
  if D == 0 then
    return 0, 0, 0
  end
  local q = idiv(D, rp)
  return now + q, D - q * rp, rp
end

-- consume adds inc tokens of debt (saturating at MAX ticks), then takes dec
-- back, never below a full bucket, with the limit and burst of the key's
-- first hit. The undo token is rp and the debt added.
local function tokenConsume(k, inc, dec)
  local h = first[k]
  local rp, wp = tokenParams(keyWindow[k], hitLimit[h], hitBurst[h])
  if rp == 0 then
    return 0, 0
  end
  local D = tokenDebt(s1[k], s2[k], s3[k], rp)
  local D2 = MAX
  if inc * wp <= MAX - D then
    D2 = D + inc * wp
  end
  if dec * wp >= D2 then
    D2 = 0
  else
    D2 = D2 - dec * wp
  end
  s1[k], s2[k], s3[k] = tokenState(D2, rp)
  return rp, D2 - D
end

local function tokenReport(k, h, allowed)
  local rp, wp, bw = tokenParams(keyWindow[k], hitLimit[h], hitBurst[h], hitCap[h])
  local D = tokenDebt(s1[k], s2[k], s3[k], rp)
  local reset = tokenReset(D, rp)
  if not allowed or D >= bw then
    return 0, reset
  end
  return idiv(bw - D, wp), reset
end

-- store writes (t, f, d) with the TTL of the TAT, or deletes the key for a
-- full bucket.
local function tokenStore(k, key)
  local t, f, d = s1[k], s2[k], s3[k]
  if t == o1[k] and f == o2[k] and d == o3[k] and ox[k] then
    return
  end
  if t == 0 and f == 0 and d == 0 then
    if ox[k] then
      redis.call('DEL', key)
    end
    return
  end
  local ttl = t - now
  if f > 0 then
    ttl = ttl + 1
  end
  redis.call('SET', key, spack('<ddd', t, f, d), 'PX', fmt('%d', ttl))
end

-- undo takes the debt delta back from a bucket still written with rp (or
-- empty: a refund may have emptied it).
local function tokenUndo(k, rp, delta)
  local d = s3[k]
  if delta == 0 or d ~= 0 and d ~= rp then
    return 0
  end
  local D = 0
  if d ~= 0 then
    D = tokenDebt(s1[k], s2[k], d, rp)
  end
  s1[k], s2[k], s3[k] = tokenState(min(max(D - delta, 0), MAX), rp)
  return 1
end


register('token_bucket', { load = tokenLoad, parse = tokenParse, roll = tokenRoll, decide = tokenDecide,
  consume = tokenConsume, report = tokenReport, store = tokenStore, undo = tokenUndo,
  -- hit is an admitted plain hit's decide, consume and report with the
  -- bucket's parameters computed once (consume's are report's but for
  -- the capacity, which only decide and report read), or nothing for a
  -- denial or a bucket of no rate (the general path's).
  hit = function(k, h, n)
    local rp, wp, bw = tokenParams(keyWindow[k], hitLimit[h], hitBurst[h], hitCap[h])
    if rp == 0 then
      return nil
    end
    local D = tokenDebt(s1[k], s2[k], s3[k], rp)
    if D + n * wp > bw then
      return nil
    end
    local D2 = MAX
    if n * wp <= MAX - D then
      D2 = D + n * wp
    end
    local t, f, d = tokenState(D2, rp)
    s1[k], s2[k], s3[k], dirty[k] = t, f, d, true
    D = tokenDebt(t, f, d, rp)
    local reset = tokenReset(D, rp)
    if D >= bw then
      return 0, reset
    end
    return idiv(bw - D, wp), reset
  end })
