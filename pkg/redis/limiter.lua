-- limiter.lua: every algorithm of pkg/limiter in one script, the Lua twin of
-- limiter.Evaluate. One call decides one request (or, on a Cluster, the part
-- of it in one slot), each hit by its own algorithm, so a request that mixes
-- algorithms is still one atomic step. Each algorithm is a section below with
-- the same functions as its Go file, doing the same float64 operations in the
-- same order (every Lua number is a double), so both give the same answers
-- bit for bit; a differential test checks it.
--
-- Atomic: Redis runs a script to completion with no other command in
-- between, so reading, deciding and writing every counter of the request is
-- one indivisible step, whichever service instance sends it. Every key the
-- script touches is in KEYS, and all KEYS share one Cluster slot (the caller
-- groups them).
--
-- Numbers are written with %d, exact for whole numbers below 2^63 (Lua's own
-- tostring keeps 14 digits only). Every write sets the key's TTL in the same
-- call, and a counter whose state becomes empty is deleted, so no key exists
-- without a TTL. A denied request writes nothing.
--
-- Mode "a" (apply): evaluate every hit of one request and consume only if the
-- request is admitted: no enforced (non-shadow, non-refund) hit outside the
-- quota group is denied, and the quota group, if it has enforced hits, has
-- one that is allowed (limiter.MarkOverLimit).
--   KEYS      the distinct counters the request touches.
--   ARGV[1]   "a".
--   ARGV[2]   now in Unix ms, or "" to use Redis TIME (production: every
--             service instance then agrees on one clock).
--   then KEY_ARGS (2) per key, in KEYS order: the algorithm (the number of
--             limiter.Algorithm: 0 sliding_window) and the window in ms.
--   then HIT_ARGS (4) per hit: key index (1-based into KEYS), requests,
--             hits, flags: 1 refund, 2 shadow, 4 exceeds (the largest
--             non-refund hits on that key > the limit's Capacity, compared
--             in Go on uint64 because doubles cannot), 8 quota.
--   Reply     {admitted (0/1), now_ms,
--              then REPLY_HIT (7) per hit: allowed (0/1), exceeds (0/1),
--                retry_after_ms, remaining_if_denied, reset_after_ms_if_denied,
--                remaining_if_admitted, reset_after_ms_if_admitted,
--              then REPLY_KEY (2) per key: an undo token (u1, u2) that mode
--                "u" takes to take back this call's consumption of the key;
--                u2 = 0 when there is nothing to take back}.
--             A remaining of 2^63 or more is a string (%.0f), since a Redis
--             integer reply is an int64; smaller ones are integers. The "if
--             denied" pair describes the counters unchanged (also what a
--             denied request reports), the "if admitted" pair after
--             consumption; the caller picks one, because in a Cluster another
--             slot's script may deny a request this one admitted.
--
-- Mode "c" (check): as "a" but never writes; the reply's admitted says
-- whether "a" would have admitted, and every token is "nothing". For the
-- slots of a Cluster request that another slot already denied.
--
-- Mode "u" (undo): take back what an admitting "a" call consumed, when the
-- request was denied by a script on another Cluster slot.
--   KEYS      the keys of that call.
--   ARGV[1]   "u".
--   ARGV[2]   now in Unix ms or "" (as above).
--   then UNDO_ARGS (4) per key: algorithm, window ms, and the key's token
--             (u1, u2) from the "a" reply.
--   Reply     the number of counters changed.
--
-- An algorithm's section defines, on its state (at, n1, n2: limiter.State's
-- At, N[0], N[1]), with w the window in ms and L the requests of a hit (of
-- the key's first hit in consume and store):
--   load(key) -> at, n1, n2, exists        the stored state (0, 0, 0 if none)
--   roll(at, n1, n2, w) -> at, n1, n2      the state as seen now
--   decide(at, n1, n2, w, L, n) -> ok, retry_ms
--   consume(at, n1, n2, w, L, inc, dec) -> at, n1, n2
--   remaining(at, n1, n2, w, L), resetAfter(at, n1, n2, w, L)
--   store(key, w, L, at, n1, n2, oat, on1, on2, exists): write the new state
--     over the stored one (only what changed), set the TTL (the state's
--     expiry, at most two windows away), or delete an empty state
--   token(rat, rn1, rn2, at, n1, n2) -> u1, u2 and undo(key, w, u1, u2) -> 0/1
-- and is registered in the algorithms table at the end of the sections.

local MAX = 4503599627370496 -- limiter.MaxCount, 2^52: counts stay exact doubles
local KEY_ARGS, HIT_ARGS, UNDO_ARGS = 2, 4, 4

local mode = ARGV[1]
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

-- windowIndex returns floor(now / w), exact in integers even when the double
-- division rounds.
local function windowIndex(w)
  local idx = math.floor(now / w)
  local e = now - idx * w
  if e < 0 then
    idx = idx - 1
  elseif e >= w then
    idx = idx + 1
  end
  return idx
end

------------------------------------------------------------------------------
-- sliding_window (limiter.SlidingWindow = 0; pkg/limiter/sliding.go).
-- State: at = window index i, n1 = cur (hits in window i), n2 = prev (hits in
-- window i-1); one hash per counter with fields i, c and p (a missing c or p
-- is 0).
local sliding = {}

-- elapsed is the part of window at that has passed, 0 when it starts later
-- than now (the clock stepped back).
local function elapsed(at, w)
  local e = now - at * w
  if e < 0 then
    return 0
  end
  return e
end

function sliding.load(key)
  local v = redis.call('HMGET', key, 'i', 'c', 'p')
  if not v[1] then
    return 0, 0, 0, false
  end
  return tonumber(v[1]), tonumber(v[2]) or 0, tonumber(v[3]) or 0, true
end

-- roll: a state stored in a later window than now's (a failover to a host
-- whose clock is behind) is kept, seen from the start of its window.
function sliding.roll(at, cur, prev, w)
  local idx = windowIndex(w)
  if at == idx or (at > idx and (cur ~= 0 or prev ~= 0)) then
    return at, cur, prev
  elseif at == idx - 1 then
    return idx, 0, cur
  end
  return idx, 0, 0
end

-- decide: admit iff p*(W-E) + (c+n)*W <= L*W.
function sliding.decide(at, cur, prev, w, L, n)
  local W, E = w, elapsed(at, w)
  local p = prev
  if p * (W - E) + (cur + n) * W <= L * W then
    return true, 0
  end
  if cur + n <= L and p > 0 then
    -- Still in this window: the first e' with p*(W-e') <= (L-c-n)*W.
    local need = W - math.floor(((L - cur) - n) * W / p)
    if need < W then
      return false, math.max(need - E, 1)
    end
  end
  -- In the next window c becomes p.
  local need = 0
  if cur > 0 then
    need = math.max(W - math.floor((L - n) * W / cur), 0)
  end
  return false, (w - E) + need
end

function sliding.consume(at, cur, prev, w, L, inc, dec)
  local c = math.min(cur + inc, MAX)
  if dec >= c then
    c = 0
  else
    c = c - dec
  end
  return at, c, prev
end

-- remaining: floor(L - estimate), at least 0.
function sliding.remaining(at, cur, prev, w, L)
  local W, E = w, elapsed(at, w)
  local r = math.floor(((L * W - prev * (W - E)) - cur * W) / W)
  if r <= 0 then
    return 0
  end
  return r
end

function sliding.resetAfter(at, cur, prev, w, L)
  local e = elapsed(at, w)
  if cur > 0 then
    return (w - e) + w
  elseif prev > 0 then
    return w - e
  end
  return 0
end

-- save writes (i, c, p) over the stored (oi, oc, op, exists): only the fields
-- that changed, then the TTL when ttl is given (HSET keeps an existing one);
-- an empty state is deleted.
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

-- store: the TTL is the end of window i+1, after which the counter is empty
-- (limiter's expires), at most two windows from now.
function sliding.store(key, w, L, i, c, p, oi, oc, op, exists)
  save(key, i, c, p, 2 * w - elapsed(i, w), oi, oc, op, exists)
end

-- token: the window index and the hits this call added to cur.
function sliding.token(ri, rc, rp, i, c, p)
  return ri, c - rc
end

-- undo subtracts delta from c while the window index is unchanged, from p once
-- the window rolled once, and drops it after that (the counter no longer
-- holds it). A counter that a refund had deleted is recreated with a TTL.
function sliding.undo(key, w, idx, delta)
  if delta == 0 then
    return 0
  end
  local i, c, p, exists = sliding.load(key)
  local oi, oc, op = i, c, p
  if not exists then
    i = idx
  end
  if i == idx then
    c = math.min(math.max(c - delta, 0), MAX)
  elseif i == idx + 1 then
    p = math.min(math.max(p - delta, 0), MAX)
  else
    return 0
  end
  if exists then
    save(key, i, c, p, nil, oi, oc, op, true)
    return 1
  end
  local ttl = (idx + 2) * w - now
  if ttl > 0 then
    save(key, i, c, p, ttl, oi, oc, op, false)
    return 1
  end
  return 0
end

------------------------------------------------------------------------------
-- The registry, indexed by limiter.Algorithm.
local algorithms = { [0] = sliding }

local function algorithmOf(arg)
  local A = algorithms[tonumber(arg)]
  if not A then
    error('sluice: unknown algorithm ' .. tostring(arg))
  end
  return A
end

if mode == 'u' then
  local changed = 0
  for k = 1, #KEYS do
    local b = 2 + (k - 1) * UNDO_ARGS
    local A = algorithmOf(ARGV[b + 1])
    changed = changed + A.undo(KEYS[k], tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3]), tonumber(ARGV[b + 4]))
  end
  return changed
end

-- Modes "a" and "c". Per key: algorithm, window, first hit's requests, stored
-- state (oa, o1, o2, ox), rolled state (ra, r1, r2), growth (inc, dec).
local nk = #KEYS
local hbase = 2 + KEY_ARGS * nk
local nh = (#ARGV - hbase) / HIT_ARGS
local alg, win, kL = {}, {}, {}
local oa, o1, o2, ox, ra, r1, r2, inc, dec = {}, {}, {}, {}, {}, {}, {}, {}, {}
for k = 1, nk do
  local A = algorithmOf(ARGV[1 + 2 * k])
  local w = tonumber(ARGV[2 + 2 * k])
  alg[k], win[k], inc[k], dec[k] = A, w, 0, 0
  oa[k], o1[k], o2[k], ox[k] = A.load(KEYS[k])
  ra[k], r1[k], r2[k] = A.roll(oa[k], o1[k], o2[k], w)
end

-- Every hit is decided with the growth its counter will take: the largest
-- hits among the non-refund hits on that counter (as limiter.Evaluate).
local hk, hL, hf = {}, {}, {}
for h = 1, nh do
  local b = hbase + (h - 1) * HIT_ARGS
  local k, L, n, f = tonumber(ARGV[b + 1]), tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3]), tonumber(ARGV[b + 4])
  hk[h], hL[h], hf[h] = k, L, f
  kL[k] = kL[k] or L
  if f % 2 == 1 then
    dec[k] = math.max(dec[k], n)
  else
    inc[k] = math.max(inc[k], n)
  end
end

local allowed, exceeds, retry = {}, {}, {}
local admitted, quotaSeen, quotaAllowed = true, false, false
for h = 1, nh do
  local k, f = hk[h], hf[h]
  local refund = f % 2 == 1
  local shadow = math.floor(f / 2) % 2 == 1
  if refund then
    allowed[h], exceeds[h], retry[h] = true, false, 0
  elseif math.floor(f / 4) % 2 == 1 then
    allowed[h], exceeds[h], retry[h] = false, true, win[k]
  else
    exceeds[h] = false
    allowed[h], retry[h] = alg[k].decide(ra[k], r1[k], r2[k], win[k], hL[h], inc[k])
  end
  if not refund and not shadow then
    if math.floor(f / 8) % 2 == 1 then
      quotaSeen = true
      quotaAllowed = quotaAllowed or allowed[h]
    elseif not allowed[h] then
      admitted = false
    end
  end
end
if quotaSeen and not quotaAllowed then
  admitted = false
end

-- Consume: per counter the largest increment, then the largest refund.
local na, n1, n2, changed = {}, {}, {}, {}
for k = 1, nk do
  na[k], n1[k], n2[k], changed[k] = ra[k], r1[k], r2[k], false
  if admitted and mode == 'a' then
    local A = alg[k]
    na[k], n1[k], n2[k] = A.consume(ra[k], r1[k], r2[k], win[k], kL[k], inc[k], dec[k])
    changed[k] = na[k] ~= ra[k] or n1[k] ~= r1[k] or n2[k] ~= r2[k]
    if na[k] ~= oa[k] or n1[k] ~= o1[k] or n2[k] ~= o2[k] then
      A.store(KEYS[k], win[k], kL[k], na[k], n1[k], n2[k], oa[k], o1[k], o2[k], ox[k])
    end
  end
end

-- reply turns a count into a reply value: a string from 2^63 on.
local function reply(x)
  if x >= 9223372036854775808 then
    return string.format('%.0f', x)
  end
  return x
end

local out = { admitted and 1 or 0, now }
for h = 1, nh do
  local k, L = hk[h], hL[h]
  local A, w = alg[k], win[k]
  local remDenied, remAdmitted = 0, 0
  local resetDenied = A.resetAfter(ra[k], r1[k], r2[k], w, L)
  local resetAdmitted = resetDenied
  if allowed[h] then
    remDenied = A.remaining(ra[k], r1[k], r2[k], w, L)
    remAdmitted = remDenied
  end
  if changed[k] then
    resetAdmitted = A.resetAfter(na[k], n1[k], n2[k], w, L)
    if allowed[h] then
      remAdmitted = A.remaining(na[k], n1[k], n2[k], w, L)
    end
  end
  out[#out + 1] = allowed[h] and 1 or 0
  out[#out + 1] = exceeds[h] and 1 or 0
  out[#out + 1] = retry[h]
  out[#out + 1] = reply(remDenied)
  out[#out + 1] = resetDenied
  out[#out + 1] = reply(remAdmitted)
  out[#out + 1] = resetAdmitted
end
for k = 1, nk do
  local u1, u2 = alg[k].token(ra[k], r1[k], r2[k], na[k], n1[k], n2[k])
  out[#out + 1] = u1
  out[#out + 1] = u2
end
return out
