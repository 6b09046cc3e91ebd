-- limiter.lua: every algorithm of pkg/limiter in one script, the Lua twin of
-- limiter.Evaluate. One call decides one request (or, on a Cluster, the part
-- of it in one slot), each hit by its own algorithm, so a request that mixes
-- algorithms is still one atomic step. Each algorithm is a section below with
-- the steps of its Go file, doing the same float64 operations in the same
-- order (every Lua number is a double), so both give the same answers bit for
-- bit; a differential test checks it.
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
-- whether "a" would have admitted, and every token is 0, 0. For the slots of
-- a Cluster request that another slot already denied.
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
-- An algorithm's section defines these functions, on its state (at, n1, n2:
-- limiter.State's At, N1, N2), with w the window in ms and L the
-- requests of a hit (of the key's first hit in write):
--   read(key, w) -> at, n1, n2, exists, rat, rn1, rn2
--       the stored state (0, 0, 0 when there is none) and the state rolled to
--       now (the Go twin's roll);
--   decide(at, n1, n2, w, L, n) -> ok, retry_ms
--   write(key, w, L, at, n1, n2, inc, dec, oat, on1, on2, exists)
--       -> at, n1, n2, u1, u2
--       consume (the Go twin's consume) and store the result over the stored
--       state: only what changed, with the TTL of its expiry (at most two
--       windows away), or delete an empty state; u1, u2 is the undo token;
--   report(at, n1, n2, w, L, allowed) -> remaining (0 unless allowed),
--       reset_after_ms (the Go twin's report);
--   undo(key, w, u1, u2) -> 1 when it changed the counter, else 0
-- and registers them in the algorithms table after the sections, under its
-- limiter.Algorithm number.
--
-- Cost: Redis runs the script's body on every call, so every function it
-- defines is created anew each time, with an allocation per local it
-- captures, and every table is garbage after it. Hence few functions (the Go
-- twin's steps grouped per phase), code inline rather than in small helpers,
-- math.* used directly rather than captured, and few tables: measured in
-- instructions per call (callgrind), each of these costs more than it saves.

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

------------------------------------------------------------------------------
-- sliding_window (limiter.SlidingWindow = 0; pkg/limiter/sliding.go).
-- State: at = window index i, n1 = cur (hits in window i), n2 = prev (hits in
-- window i-1); one hash per counter with fields i, c and p (a missing c or p
-- is 0). e, the part of window i that has passed, is 0 when window i starts
-- later than now (the clock stepped back).

-- save writes (i, c, p) over the stored (oi, oc, op, exists): only the fields
-- that changed, then the TTL when ttl is given (HSET keeps an existing one);
-- an empty state is deleted. Numbers are written with %d: exact below 2^63
-- and about twice as fast as %.0f.
local function slidingSave(key, i, c, p, ttl, oi, oc, op, exists)
  if c == 0 and p == 0 then
    if exists then
      redis.call('DEL', key)
    end
    return
  end
  local args = { 'HSET', key }
  if not exists or i ~= oi then
    args[#args + 1] = 'i'
    args[#args + 1] = string.format('%d', i)
  end
  if c ~= oc then
    args[#args + 1] = 'c'
    args[#args + 1] = string.format('%d', c)
  end
  if p ~= op then
    args[#args + 1] = 'p'
    args[#args + 1] = string.format('%d', p)
  end
  if #args > 2 then
    redis.call(unpack(args))
  end
  if ttl then
    redis.call('PEXPIRE', key, string.format('%d', ttl))
  end
end

-- read is load and roll: a state stored in a later window than now's (a
-- failover to a host whose clock is behind) is kept, seen from the start of
-- its window. The window index is floor(now / w), made exact in integers even
-- when the double division rounds.
local function slidingRead(key, w)
  local v = redis.call('HMGET', key, 'i', 'c', 'p')
  local i, c, p, exists = 0, 0, 0, false
  if v[1] then
    i, c, p, exists = tonumber(v[1]), tonumber(v[2]) or 0, tonumber(v[3]) or 0, true
  end
  local idx = math.floor(now / w)
  local e = now - idx * w
  if e < 0 then
    idx = idx - 1
  elseif e >= w then
    idx = idx + 1
  end
  if i == idx or (i > idx and (c ~= 0 or p ~= 0)) then
    return i, c, p, exists, i, c, p
  elseif i == idx - 1 then
    return i, c, p, exists, idx, 0, c
  end
  return i, c, p, exists, idx, 0, 0
end

-- decide: admit iff p*(W-E) + (c+n)*W <= L*W.
local function slidingDecide(at, cur, prev, w, L, n)
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

-- write is consume and store: cur grows by inc, saturating at MAX, then
-- shrinks by dec, never below 0. The TTL is the end of window i+1, after
-- which the counter is empty (limiter's expires), at most two windows from
-- now. The undo token is the window index and the hits added to cur.
local function slidingWrite(key, w, L, i, cur, prev, inc, dec, oi, oc, op, exists)
  local c = math.min(cur + inc, MAX)
  if dec >= c then
    c = 0
  else
    c = c - dec
  end
  if i ~= oi or c ~= oc or prev ~= op then
    local e = now - i * w
    if e < 0 then
      e = 0
    end
    slidingSave(key, i, c, prev, 2 * w - e, oi, oc, op, exists)
  end
  return i, c, prev, i, c - cur
end

-- report is remaining (floor(L - estimate), at least 0; computed only for an
-- allowed hit) and resetAfter.
local function slidingReport(at, cur, prev, w, L, allowed)
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
  local r = math.floor(((L * W - prev * (W - E)) - cur * W) / W)
  if r <= 0 then
    return 0, reset
  end
  return r, reset
end

-- undo subtracts delta from c while the window index is unchanged, from p once
-- the window rolled once, and drops it after that (the counter no longer
-- holds it). A counter that a refund had deleted is recreated with a TTL.
local function slidingUndo(key, w, idx, delta)
  if delta == 0 then
    return 0
  end
  local v = redis.call('HMGET', key, 'i', 'c', 'p')
  local exists = v[1] ~= false
  local i, c, p = idx, 0, 0
  if exists then
    i, c, p = tonumber(v[1]), tonumber(v[2]) or 0, tonumber(v[3]) or 0
  end
  local oi, oc, op = i, c, p
  if i == idx then
    c = math.min(math.max(c - delta, 0), MAX)
  elseif i == idx + 1 then
    p = math.min(math.max(p - delta, 0), MAX)
  else
    return 0
  end
  if exists then
    slidingSave(key, i, c, p, nil, oi, oc, op, true)
    return 1
  end
  local ttl = (idx + 2) * w - now
  if ttl > 0 then
    slidingSave(key, i, c, p, ttl, oi, oc, op, false)
    return 1
  end
  return 0
end

------------------------------------------------------------------------------
-- The registry, indexed by limiter.Algorithm.
local algorithms = {
  [0] = { read = slidingRead, decide = slidingDecide, write = slidingWrite, report = slidingReport, undo = slidingUndo },
}

if mode == 'u' then
  local changed = 0
  for k = 1, #KEYS do
    local b = 2 + (k - 1) * UNDO_ARGS
    local A = algorithms[tonumber(ARGV[b + 1])]
    if not A then
      error('sluice: unknown algorithm ' .. ARGV[b + 1])
    end
    changed = changed + A.undo(KEYS[k], tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3]), tonumber(ARGV[b + 4]))
  end
  return changed
end

-- Modes "a" and "c". Per key: algorithm, window, stored state (oa, o1, o2,
-- ox), rolled state (ra, r1, r2), growth (inc, dec).
local nk = #KEYS
local hbase = 2 + KEY_ARGS * nk
local nh = (#ARGV - hbase) / HIT_ARGS
local alg, win = {}, {}
local oa, o1, o2, ox, ra, r1, r2, inc, dec = {}, {}, {}, {}, {}, {}, {}, {}, {}
for k = 1, nk do
  local A = algorithms[tonumber(ARGV[1 + 2 * k])]
  if not A then
    error('sluice: unknown algorithm ' .. ARGV[1 + 2 * k])
  end
  local w = tonumber(ARGV[2 + 2 * k])
  alg[k], win[k], inc[k], dec[k] = A, w, 0, 0
  oa[k], o1[k], o2[k], ox[k], ra[k], r1[k], r2[k] = A.read(KEYS[k], w)
end

-- Every hit is decided with the growth its counter will take: the largest
-- hits among the non-refund hits on that counter (as limiter.Evaluate).
local hk, hL, hf = {}, {}, {}
for h = 1, nh do
  local b = hbase + (h - 1) * HIT_ARGS
  local k, L, n, f = tonumber(ARGV[b + 1]), tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3]), tonumber(ARGV[b + 4])
  hk[h], hL[h], hf[h] = k, L, f
  if f % 2 == 1 then
    dec[k] = math.max(dec[k], n)
  else
    inc[k] = math.max(inc[k], n)
  end
end

local allowed, retry = {}, {}
local admitted, quotaSeen, quotaAllowed = true, false, false
for h = 1, nh do
  local k, f = hk[h], hf[h]
  local refund = f % 2 == 1
  local shadow = math.floor(f / 2) % 2 == 1
  if refund then
    allowed[h], retry[h] = true, 0
  elseif math.floor(f / 4) % 2 == 1 then
    allowed[h], retry[h] = false, win[k]
  else
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

-- The reply, first as if nothing were consumed. A remaining of 2^63 or more
-- is sent as a string: see the header.
local out = { admitted and 1 or 0, now }
local o = 2
for h = 1, nh do
  local k, f, ok = hk[h], hf[h], allowed[h]
  local rem, reset = alg[k].report(ra[k], r1[k], r2[k], win[k], hL[h], ok)
  if rem >= 9223372036854775808 then
    rem = string.format('%.0f', rem)
  end
  local ex = f % 2 == 0 and math.floor(f / 4) % 2 == 1
  out[o + 1], out[o + 2], out[o + 3], out[o + 4] = ok and 1 or 0, ex and 1 or 0, retry[h], rem
  out[o + 5], out[o + 6], out[o + 7] = reset, rem, reset
  o = o + 7
end

-- Consume, when admitted in mode "a": per counter the largest increment,
-- then the largest refund. The hits of a counter that changed get the
-- "if admitted" pair of the new state; each counter's undo token follows the
-- hits (0, 0 for one left as it was).
local consume = admitted and mode == 'a'
for k = 1, nk do
  local u1, u2 = 0, 0
  local first = nil -- the key's first hit, whose requests write takes
  if consume then
    for h = 1, nh do
      if hk[h] == k then
        first = h
        break
      end
    end
  end
  if first then
    local A, w = alg[k], win[k]
    local at, c1, c2
    at, c1, c2, u1, u2 = A.write(KEYS[k], w, hL[first], ra[k], r1[k], r2[k], inc[k], dec[k], oa[k], o1[k], o2[k], ox[k])
    if at ~= ra[k] or c1 ~= r1[k] or c2 ~= r2[k] then
      for h = 1, nh do
        if hk[h] == k then
          local rem, reset = A.report(at, c1, c2, w, hL[h], allowed[h])
          if rem >= 9223372036854775808 then
            rem = string.format('%.0f', rem)
          end
          out[7 * h + 1], out[7 * h + 2] = rem, reset -- hit h's 6th and 7th: 2 + 7*(h-1) + 6
        end
      end
    end
  end
  out[o + 1], out[o + 2] = u1, u2
  o = o + 2
end
return out
