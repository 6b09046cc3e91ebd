-- sliding_window.lua: the sliding window counter of DESIGN.md section 3, the
-- Lua twin of limiter.Evaluate (pkg/limiter/sliding.go). Every number is a
-- double and every operation is done in the same order as Evaluate's float64
-- code, so both give the same answers bit for bit; a differential test checks it.
--
-- Each counter is one hash with fields i (window index: floor(now_ms /
-- window_ms)), c (hits in window i) and p (hits in window i-1); a missing c or
-- p is 0. Numbers are written with %d, exact for these whole numbers below
-- 2^63 (Lua's own tostring keeps 14 digits only), and only the fields that
-- changed are written. Every write sets PEXPIRE to the end of window i+1 (at
-- most two windows), after which the counter is zero anyway; a counter that
-- becomes zero is deleted. So no key exists without a TTL.
--
-- Mode "a" (apply): evaluate every hit of one request and consume only if
-- every enforced hit is admitted.
--   KEYS      the distinct counter hashes the request touches.
--   ARGV[1]   "a".
--   ARGV[2]   now in Unix ms, or "" to use Redis TIME (production: every
--             service instance then agrees on one clock).
--   ARGV[3..] five per hit: key index (1-based into KEYS), requests, window
--             ms, hits, flags (1 refund, 2 shadow, 4 exceeds: the largest
--             non-refund hits on that key > requests, compared in Go on
--             uint64 because doubles cannot). Every hit on
--             one key has the same window (the window is part of the key).
--   Reply     {admitted (0/1), now_ms,
--              then seven per hit: allowed (0/1), exceeds (0/1), retry_after_ms,
--                remaining_if_denied, reset_after_ms_if_denied,
--                remaining_if_admitted, reset_after_ms_if_admitted,
--              then two per key: window index, delta (cur after - cur before;
--                0 unless admitted)}.
--             A remaining of 2^63 or more is a string (%.0f), since a Redis
--             integer reply is an int64; smaller ones are integers. The "if denied"
--             pair describes the counters unchanged (also what a denied
--             request reports), the "if admitted" pair after consumption; the
--             caller picks one, because in a Cluster another slot's script
--             may deny a request this one admitted.
--
-- Mode "c" (check): as "a" but never writes; the reply's admitted says
-- whether "a" would have admitted, and delta is 0. For the slots of a Cluster
-- request that another slot already denied.
--
-- Mode "u" (undo): take back what an admitting "a" call consumed, when the
-- request was denied by a script on another Cluster slot.
--   KEYS      the keys of that call.
--   ARGV[1]   "u".
--   ARGV[2]   now in Unix ms or "" (as above; only used for a new key's TTL).
--   ARGV[3..] three per key: window index and delta from the "a" reply, and
--             the window ms. The delta is subtracted from c while the window
--             index is unchanged, from p once the window rolled once, and
--             dropped after that (the counter no longer holds it).
--   Reply     the number of counters changed.
--
-- Atomic: Redis runs a script to completion with no other command in
-- between, so reading, deciding and writing every counter of the request is
-- one indivisible step, whichever service instance sends it. All KEYS share
-- one Cluster slot (the caller groups them).

local MAX = 4503599627370496 -- limiter.MaxCount, 2^52: counts stay exact doubles

local now
if ARGV[2] ~= '' then
  now = tonumber(ARGV[2])
else
  -- Needed before writing after a non-deterministic command on Redis < 5;
  -- a no-op (deprecated) on 7.
  if redis.replicate_commands then redis.replicate_commands() end
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- fmt writes a whole number below 2^63; %d is exact there and about twice
-- as fast as %.0f, which matters at a few conversions per call.
local function fmt(x)
  return string.format('%d', x)
end

-- load returns the stored window index, cur, prev and whether the key exists.
local function load(key)
  local v = redis.call('HMGET', key, 'i', 'c', 'p')
  if not v[1] then
    return 0, 0, 0, false
  end
  return tonumber(v[1]), tonumber(v[2]) or 0, tonumber(v[3]) or 0, true
end

-- save writes a counter (i, c, p) whose stored state is (oi, oc, op, exists)
-- and sets its TTL when ttl is given, or deletes it when it is zero. Only
-- the fields that changed are written.
local function save(key, i, c, p, ttl, oi, oc, op, exists)
  if c == 0 and p == 0 then
    if exists then
      redis.call('DEL', key)
    end
    return
  end
  local args = { 'HSET', key }
  if not exists or i ~= oi then
    args[#args + 1] = 'i'
    args[#args + 1] = fmt(i)
  end
  if c ~= oc then
    args[#args + 1] = 'c'
    args[#args + 1] = fmt(c)
  end
  if p ~= op then
    args[#args + 1] = 'p'
    args[#args + 1] = fmt(p)
  end
  if #args > 2 then
    redis.call(unpack(args))
  end
  if ttl then
    redis.call('PEXPIRE', key, fmt(ttl))
  end
end

-- windowOf returns floor(now / w) and now - index*w, exact in integers even
-- when the double division rounds.
local function windowOf(w)
  local idx = math.floor(now / w)
  local e = now - idx * w
  if e < 0 then
    idx = idx - 1
    e = e + w
  elseif e >= w then
    idx = idx + 1
    e = e - w
  end
  return idx, e
end

if ARGV[1] == 'u' then
  local changed = 0
  for k = 1, #KEYS do
    local idx, delta, w = tonumber(ARGV[3 * k]), tonumber(ARGV[3 * k + 1]), tonumber(ARGV[3 * k + 2])
    local i, c, p, exists = load(KEYS[k])
    local oi, oc, op = i, c, p
    if not exists then
      i = idx
    end
    local hit = true
    if i == idx then
      c = math.min(math.max(c - delta, 0), MAX)
    elseif i == idx + 1 then
      p = math.min(math.max(p - delta, 0), MAX)
    else
      hit = false
    end
    if hit and delta ~= 0 then
      if exists then
        save(KEYS[k], i, c, p, nil, oi, oc, op, true) -- HSET keeps the TTL
        changed = changed + 1
      else
        local ttl = (idx + 2) * w - now
        if ttl > 0 then
          save(KEYS[k], i, c, p, ttl, oi, oc, op, false)
          changed = changed + 1
        end
      end
    end
  end
  return changed
end

-- Mode "a". Per key: stored state (oi, oc, op), rolled state (ri, rc, rp),
-- window w, elapsed e.
local oi, oc, op, ox, ri, rc, rp, kw, ke = {}, {}, {}, {}, {}, {}, {}, {}, {}
local nh = (#ARGV - 2) / 5
local hk, hL, hn, hrefund = {}, {}, {}, {}
local allowed, exceeds, retry = {}, {}, {}
local admitted = true

-- Every hit is decided with the growth its counter will take: the largest
-- hits among the non-refund hits on that counter (as limiter.Evaluate).
local ginc = {}
for h = 1, nh do
  local b = 2 + (h - 1) * 5
  if tonumber(ARGV[b + 5]) % 2 ~= 1 then
    local k = tonumber(ARGV[b + 1])
    ginc[k] = math.max(ginc[k] or 0, tonumber(ARGV[b + 4]))
  end
end

for h = 1, nh do
  local b = 2 + (h - 1) * 5
  local k = tonumber(ARGV[b + 1])
  local L = tonumber(ARGV[b + 2])
  local w = tonumber(ARGV[b + 3])
  local n = tonumber(ARGV[b + 4])
  local f = tonumber(ARGV[b + 5])
  local refund = f % 2 == 1
  local shadow = math.floor(f / 2) % 2 == 1
  local ex = math.floor(f / 4) % 2 == 1
  hk[h], hL[h], hn[h], hrefund[h] = k, L, n, refund

  if ri[k] == nil then
    local i0, c0, p0, x0 = load(KEYS[k])
    local idx, e = windowOf(w)
    oi[k], oc[k], op[k], ox[k] = i0, c0, p0, x0
    if i0 == idx then
      ri[k], rc[k], rp[k] = idx, c0, p0
    elseif x0 and i0 > idx then
      -- The clock stepped back (a failover to a host whose clock is
      -- behind): keep the counter, seen from the start of its window.
      ri[k], rc[k], rp[k] = i0, c0, p0
      e = 0
    elseif i0 == idx - 1 then
      ri[k], rc[k], rp[k] = idx, 0, c0
    else
      ri[k], rc[k], rp[k] = idx, 0, 0
    end
    kw[k], ke[k] = w, e
  end

  if refund then
    allowed[h], exceeds[h], retry[h] = true, false, 0
  elseif ex then
    allowed[h], exceeds[h], retry[h] = false, true, w
  else
    -- slidingDecide: admit iff p*(W-E) + (c+n)*W <= L*W.
    local n = ginc[k]
    local W, E = w, ke[k]
    local p, cur = rp[k], rc[k]
    exceeds[h] = false
    if p * (W - E) + (cur + n) * W <= L * W then
      allowed[h], retry[h] = true, 0
    else
      allowed[h] = false
      local r = nil
      if cur + n <= L and p > 0 then
        -- Still in this window: the first e' with p*(W-e') <= (L-c-n)*W.
        local need = W - math.floor(((L - cur) - n) * W / p)
        if need < W then
          r = math.max(need - E, 1)
        end
      end
      if r == nil then
        -- In the next window c becomes p.
        local need = 0
        if cur > 0 then
          need = math.max(W - math.floor((L - n) * W / cur), 0)
        end
        r = (w - E) + need
      end
      retry[h] = r
    end
  end
  if not allowed[h] and not shadow then
    admitted = false
  end
end

-- Consume: per counter the largest increment, then the largest refund, never
-- below zero, saturating at MAX.
local nk = #KEYS
local nc, delta = {}, {}
for k = 1, nk do
  nc[k], delta[k] = rc[k], 0
end
if admitted and ARGV[1] == 'a' then
  local inc, dec = {}, {}
  for k = 1, nk do
    inc[k], dec[k] = 0, 0
  end
  for h = 1, nh do
    local k = hk[h]
    if hrefund[h] then
      dec[k] = math.max(dec[k], hn[h])
    else
      inc[k] = math.max(inc[k], hn[h])
    end
  end
  for k = 1, nk do
    if ri[k] ~= nil then
      local c = math.min(rc[k] + inc[k], MAX)
      if dec[k] >= c then
        c = 0
      else
        c = c - dec[k]
      end
      nc[k], delta[k] = c, c - rc[k]
      if ri[k] ~= oi[k] or c ~= oc[k] or rp[k] ~= op[k] then
        save(KEYS[k], ri[k], c, rp[k], 2 * kw[k] - ke[k], oi[k], oc[k], op[k], ox[k])
      end
    end
  end
end

-- slidingRemaining: floor(L - estimate), at least 0; a string from 2^63 on.
local function remaining(c, p, L, W, E)
  local r = math.floor(((L * W - p * (W - E)) - c * W) / W)
  if r <= 0 then
    return 0
  elseif r >= 9223372036854775808 then
    return string.format('%.0f', r)
  end
  return r
end

-- slidingResetAfter.
local function resetAfter(c, p, w, e)
  if c > 0 then
    return (w - e) + w
  elseif p > 0 then
    return w - e
  end
  return 0
end

local out = { admitted and 1 or 0, now }
for h = 1, nh do
  local k = hk[h]
  local w, e, p = kw[k], ke[k], rp[k]
  local remDenied, remAdmitted = 0, 0
  if allowed[h] then
    remDenied = remaining(rc[k], p, hL[h], w, e)
    remAdmitted = remaining(nc[k], p, hL[h], w, e)
  end
  out[#out + 1] = allowed[h] and 1 or 0
  out[#out + 1] = exceeds[h] and 1 or 0
  out[#out + 1] = retry[h]
  out[#out + 1] = remDenied
  out[#out + 1] = resetAfter(rc[k], p, w, e)
  out[#out + 1] = remAdmitted
  out[#out + 1] = resetAfter(nc[k], p, w, e)
end
for k = 1, nk do
  out[#out + 1] = ri[k] or 0
  out[#out + 1] = delta[k]
end
return out
