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
--   then KEY_ARGS (3) per key, in KEYS order: the algorithm (the number of
--             limiter.Algorithm: 0 sliding_window, 1 token_bucket,
--             2 fixed_window, 3 sliding_log, 4 concurrency), the window in
--             ms, and the sub-windows (limiter.Limit.SubWindowCount: 1 or
--             more for sliding_window, 0 for the others).
--   then HIT_ARGS (5) per hit: key index (1-based into KEYS), requests,
--             burst (a token bucket's capacity, 0 for the others), hits,
--             flags: 1 refund, 2 shadow, 4 exceeds (the largest non-refund
--             hits on that key > the limit's Capacity, compared in Go on
--             uint64 because doubles cannot), 8 quota, 16 overdraw (the
--             hit is allowed while one more hit fits, and its key grows by
--             the largest overdraw hits even when the request is denied).
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
-- Mode "c" (check): as "a" but writes only what overdraw hits consume (as a
-- denied "a" call does); the reply's admitted says whether "a" would have
-- admitted, and every token is 0, 0. For the slots of a Cluster request that
-- another slot already denied.
--
-- Mode "u" (undo): take back what an admitting "a" call consumed, when the
-- request was denied by a script on another Cluster slot. Idempotent: the
-- caller names each undo by a marker key, which the first run creates, so a
-- retried undo (its reply lost to a deadline after it ran) changes nothing.
--   KEYS      the keys of that call, then the marker: a key of the same
--             slot (the first key's name, ":u:" and an id unique to the
--             undo).
--   ARGV[1]   "u".
--   ARGV[2]   now in Unix ms or "" (as above).
--   ARGV[3]   the marker's TTL in ms: how long a retry is recognised.
--   then UNDO_ARGS (5) per counter key: algorithm, window ms,
--             sub-windows, and the key's token (u1, u2) from the "a" reply.
--   Reply     the number of counters changed, or -1 when the marker
--             exists: this undo already ran.
--
-- An algorithm's section defines these functions, on its state (at, n1, n2:
-- limiter.State's At, N1, N2, or what the section says), with w the window
-- in ms, L the requests and B the burst of a hit (of the key's first hit in
-- write) and N the key's sub-windows (for the logs: 1 when a refund
-- releases the oldest entries, 0 the newest):
--   read(key, w, N) -> at, n1, n2, exists, rat, rn1, rn2
--       the stored state (0, 0, 0 when there is none) and the state rolled to
--       now (the Go twin's roll);
--   decide(at, n1, n2, w, L, n, B, N) -> ok, retry_ms
--   write(key, w, L, at, n1, n2, inc, dec, oat, on1, on2, exists, B, N)
--       -> at, n1, n2, u1, u2
--       consume (the Go twin's consume) and store the result over the stored
--       state: only what changed, with the TTL of its expiry (at most two
--       windows away), or delete an empty state; u1, u2 is the undo token;
--   report(at, n1, n2, w, L, allowed, B, N) -> remaining (0 unless
--       allowed), reset_after_ms (the Go twin's report);
--   undo(key, w, u1, u2, N) -> 1 when it changed the counter, else 0
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
local KEY_ARGS, HIT_ARGS, UNDO_ARGS = 3, 5, 5
local MAXLOG = 1000 -- limiter.MaxLogRequests

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

-- idiv is floor(a / b) for whole a >= 0 and b > 0 below 2^53, exact even
-- where the double division rounds (the Go twins divide in integers).
local function idiv(a, b)
  local q = math.floor(a / b)
  local r = a - q * b
  if r < 0 then
    return q - 1
  elseif r >= b then
    return q + 1
  end
  return q
end

------------------------------------------------------------------------------
-- sliding_window with N > 1 sub-windows (pkg/limiter/sliding_sub.go). One
-- hash per counter: field "i" the sub-window index j = floor(now / s) with
-- s = w / N, and one field per sub-window holding hits, named by its index.
-- The rolled state is at = j, n1 = the counts of sub-windows j-N .. j, oldest
-- first, as an array of N+1 (n2 unused). read returns the stored fields as
-- "on1" so that write changes only what differs.

local function subRead(key, w, N)
  local s = w / N
  local v = redis.call('HGETALL', key)
  local i, fields, exists = 0, {}, #v > 0
  for x = 1, #v, 2 do
    if v[x] == 'i' then
      i = tonumber(v[x + 1])
    else
      fields[tonumber(v[x])] = tonumber(v[x + 1])
    end
  end
  local j = math.floor(now / s)
  local e = now - j * s
  if e < 0 then
    j = j - 1
  elseif e >= s then
    j = j + 1
  end
  local held = false
  for _, c in pairs(fields) do
    if c ~= 0 then
      held = true
    end
  end
  local at = j
  if i == j or (i > j and held) then
    at = i
  elseif i > j or j - i > N then
    held = false
  end
  local arr = {}
  for m = 1, N + 1 do
    arr[m] = held and fields[at - N + m - 1] or 0
  end
  return i, fields, 0, exists, at, arr, 0
end

local function subDecide(at, arr, _, w, L, n, _, N)
  local s = w / N
  local rest = 0
  for m = 1, N + 1 do
    rest = rest + arr[m]
  end
  if rest + n <= L then
    return true, 0
  end
  local e = now - at * s
  if e < 0 then
    e = 0
  end
  for m = 1, N + 1 do
    rest = rest - arr[m]
    if rest + n <= L then
      return false, m * s - e
    end
  end
  return false, (N + 1) * s - e
end

-- write: the current sub-window grows by inc (saturating), then dec is
-- taken from it, never below 0. The undo token is the sub-window index and
-- what the current sub-window gained.
local function subWrite(key, w, L, at, arr, _, inc, dec, oi, fields, _, exists, _, N)
  local s = w / N
  local new, held, last = {}, false, 0
  for m = 1, N + 1 do
    new[m] = arr[m]
  end
  new[N + 1] = math.min(new[N + 1] + inc, MAX)
  new[N + 1] = new[N + 1] - math.min(dec, new[N + 1])
  for m = 1, N + 1 do
    if new[m] ~= 0 then
      held, last = true, m
    end
  end
  if not held then
    if exists then
      redis.call('DEL', key)
    end
    return at, new, 0, at, new[N + 1] - arr[N + 1]
  end
  local args, gone = { 'HSET', key }, { 'HDEL', key }
  if not exists or oi ~= at then
    args[#args + 1], args[#args + 2] = 'i', string.format('%d', at)
  end
  for idx, c in pairs(fields) do
    if idx < at - N or idx > at then
      gone[#gone + 1] = string.format('%d', idx)
    end
  end
  for m = 1, N + 1 do
    local idx = at - N + m - 1
    local old = fields[idx] or 0
    if new[m] ~= old then
      if new[m] == 0 then
        gone[#gone + 1] = string.format('%d', idx)
      else
        args[#args + 1], args[#args + 2] = string.format('%d', idx), string.format('%d', new[m])
      end
    end
  end
  if #args > 2 then
    redis.call(unpack(args))
  end
  if #gone > 2 then
    redis.call(unpack(gone))
  end
  if #args > 2 or #gone > 2 then
    redis.call('PEXPIRE', key, string.format('%d', (at + last) * s - now))
  end
  return at, new, 0, at, new[N + 1] - arr[N + 1]
end

local function subReport(at, arr, _, w, L, allowed, _, N)
  local s = w / N
  local e = now - at * s
  if e < 0 then
    e = 0
  end
  local reset, sum = 0, 0
  for m = 1, N + 1 do
    sum = sum + arr[m]
    if arr[m] ~= 0 then
      reset = m * s - e
    end
  end
  if not allowed then
    return 0, reset
  end
  local r = L - sum
  if r <= 0 then
    return 0, reset
  end
  return r, reset
end

-- undo subtracts delta from sub-window idx while the hash still holds it,
-- and puts back what a refund took from a sub-window (or a counter) that it
-- emptied, while that sub-window is still counted.
local function subUndo(key, w, idx, delta, N)
  if delta == 0 then
    return 0
  end
  local f = string.format('%d', idx)
  local c = tonumber(redis.call('HGET', key, f))
  if not c then
    local s = w / N
    local ttl = (idx + N + 1) * s - now
    if delta > 0 or ttl <= 0 then
      return 0
    end
    if redis.call('EXISTS', key) == 0 then
      redis.call('HSET', key, 'i', f)
      redis.call('PEXPIRE', key, string.format('%d', ttl))
    end
    c = 0
  end
  c = math.min(math.max(c - delta, 0), MAX)
  if c == 0 then
    redis.call('HDEL', key, f)
  else
    redis.call('HSET', key, f, string.format('%d', c))
  end
  return 1
end

------------------------------------------------------------------------------
-- token_bucket (limiter.TokenBucket = 1; pkg/limiter/token.go): GCRA. One
-- hash per counter: t, f and d, the theoretical arrival time TAT = t + f/d
-- ms. With g = gcd(L, w), rp = L/g and wp = w/g, a token is wp ticks of
-- 1/rp ms; every number stays a whole double below 2^53 (the Go twin's
-- Validate), so both twins compute the same integers.

local function tokenParams(w, L, B)
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
  return L / a, w / a, B * (w / a)
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
  return math.min(dt * rp + f, MAX)
end

local function tokenRead(key)
  local v = redis.call('HMGET', key, 't', 'f', 'd')
  if not v[1] then
    return 0, 0, 0, false, 0, 0, 0
  end
  local t, f, d = tonumber(v[1]), tonumber(v[2]) or 0, tonumber(v[3]) or 0
  return t, f, d, true, t, f, d
end

local function tokenDecide(t, f, d, w, L, n, B)
  local rp, wp, bw = tokenParams(w, L, B)
  local need = tokenDebt(t, f, d, rp) + n * wp
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

-- tokenSave stores (t, f, d) with the TTL of the TAT, or deletes the key
-- for a full bucket.
local function tokenSave(key, t, f, d, exists)
  if t == 0 and f == 0 and d == 0 then
    if exists then
      redis.call('DEL', key)
    end
    return
  end
  redis.call('HSET', key, 't', string.format('%d', t), 'f', string.format('%d', f), 'd', string.format('%d', d))
  local ttl = t - now
  if f > 0 then
    ttl = ttl + 1
  end
  redis.call('PEXPIRE', key, string.format('%d', ttl))
end

-- write adds inc tokens of debt (saturating at MAX ticks), then takes dec
-- back, never below a full bucket. The undo token is rp and the debt added.
local function tokenWrite(key, w, L, t, f, d, inc, dec, _, _, _, exists, B)
  local rp, wp = tokenParams(w, L, B)
  if rp == 0 then
    return t, f, d, 0, 0
  end
  local D = tokenDebt(t, f, d, rp)
  local D2 = MAX
  if inc * wp <= MAX - D then
    D2 = D + inc * wp
  end
  if dec * wp >= D2 then
    D2 = 0
  else
    D2 = D2 - dec * wp
  end
  local nt, nf, nd = tokenState(D2, rp)
  if nt ~= t or nf ~= f or nd ~= d then
    tokenSave(key, nt, nf, nd, exists)
  end
  return nt, nf, nd, rp, D2 - D
end

local function tokenReport(t, f, d, w, L, allowed, B)
  local rp, wp, bw = tokenParams(w, L, B)
  local D = tokenDebt(t, f, d, rp)
  local reset = 0
  if D > 0 then
    reset = idiv(D, rp)
    if reset * rp < D then
      reset = reset + 1
    end
  end
  if not allowed or D >= bw then
    return 0, reset
  end
  return idiv(bw - D, wp), reset
end

-- undo takes the debt delta back from a bucket still written with rp.
local function tokenUndo(key, w, rp, delta)
  if delta == 0 then
    return 0
  end
  local v = redis.call('HMGET', key, 't', 'f', 'd')
  local D = 0 -- a refund may have deleted the key: a full bucket
  if v[1] then
    if tonumber(v[3]) ~= rp then
      return 0
    end
    D = tokenDebt(tonumber(v[1]), tonumber(v[2]) or 0, rp, rp)
  end
  local t, f, d = tokenState(math.min(math.max(D - delta, 0), MAX), rp)
  tokenSave(key, t, f, d, v[1] ~= false)
  return 1
end

------------------------------------------------------------------------------
-- fixed_window (limiter.FixedWindow = 2; pkg/limiter/fixed.go): a hash with
-- i, the window index, and c, the count (sliding_window's layout without p).

local function fixedRead(key, w)
  local v = redis.call('HMGET', key, 'i', 'c')
  local i, c, exists = 0, 0, false
  if v[1] then
    i, c, exists = tonumber(v[1]), tonumber(v[2]) or 0, true
  end
  local idx = math.floor(now / w)
  local e = now - idx * w
  if e < 0 then
    idx = idx - 1
  elseif e >= w then
    idx = idx + 1
  end
  if i == idx or (i > idx and c ~= 0) then
    return i, c, 0, exists, i, c, 0
  end
  return i, c, 0, exists, idx, 0, 0
end

local function fixedDecide(at, c, _, w, L, n)
  if c + n <= L then
    return true, 0
  end
  local e = now - at * w
  if e < 0 then
    e = 0
  end
  return false, w - e
end

local function fixedWrite(key, w, L, i, cur, _, inc, dec, oi, oc, _, exists)
  local c = math.min(cur + inc, MAX)
  if dec >= c then
    c = 0
  else
    c = c - dec
  end
  if i ~= oi or c ~= oc then
    slidingSave(key, i, c, 0, (i + 1) * w - now, oi, oc, 0, exists)
  end
  return i, c, 0, i, c - cur
end

local function fixedReport(at, c, _, w, L, allowed)
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

local function fixedUndo(key, w, idx, delta)
  if delta == 0 then
    return 0
  end
  local v = redis.call('HMGET', key, 'i', 'c')
  if not v[1] then
    -- A refund deleted the counter: recreate it while its window lasts.
    local ttl = (idx + 1) * w - now
    if delta > 0 or ttl <= 0 then
      return 0
    end
    slidingSave(key, idx, math.min(-delta, MAX), 0, ttl, idx, 0, 0, false)
    return 1
  end
  if tonumber(v[1]) ~= idx then
    return 0
  end
  local c = tonumber(v[2]) or 0
  slidingSave(key, idx, math.min(math.max(c - delta, 0), MAX), 0, nil, idx, c, 0, true)
  return 1
end

------------------------------------------------------------------------------
-- sliding_log (3) and concurrency (4) (pkg/limiter/log.go): a sorted set per
-- counter, one member per counted hit, scored by its time; members are
-- "<time>:<index>", the index (4 digits, so that members of one time sort
-- by it) one more than the largest of that time. The rolled state is
-- at = the key, n1 = the count in (now - w, now]; read writes nothing, and
-- write drops what has left the window.
--
-- A refund's removed members stay TOMB ms as tombstones, "~" and the
-- member scored -now (below every live time, so no read sees them), so that
-- an undo can put them back at their own times: the undo token is now and
-- added * 4096 + removed (each at most MAXLOG).
local TOMB = 1000

-- logNewest is the time of the newest live member of key (count > 0).
local function logNewest(key)
  local v = redis.call('ZREVRANGEBYSCORE', key, '+inf', '(0', 'WITHSCORES', 'LIMIT', 0, 1)
  return tonumber(v[2])
end

local function logRead(key, w)
  local count = redis.call('ZCOUNT', key, string.format('(%d', now - w), '+inf')
  return key, count, 0, count > 0, key, count, 0
end

local function logDecide(key, count, _, w, L, n)
  if count + n <= L then
    return true, 0
  end
  local v = redis.call('ZRANGEBYSCORE', key, string.format('(%d', now - w), '+inf', 'WITHSCORES', 'LIMIT', count + n - L - 1, 1)
  return false, tonumber(v[2]) + w - now
end

-- logAdd adds n members at time t.
local function logAdd(key, t, n)
  local top = redis.call('ZREVRANGEBYSCORE', key, t, t, 'LIMIT', 0, 1)
  local base = 0
  if top[1] then
    base = tonumber(string.match(top[1], ':(%d+)$')) + 1
  end
  local args = { 'ZADD', key }
  for x = 0, n - 1 do
    args[#args + 1] = string.format('%d', t)
    args[#args + 1] = string.format('%d:%04d', t, base + x)
  end
  redis.call(unpack(args))
end

-- write adds inc entries at now (the log holding at most MAXLOG), then
-- removes dec: the newest (N = 0) or the oldest (N = 1).
local function logWrite(key, w, L, _, count, _, inc, dec, _, _, _, _, _, N)
  local cut = now - w
  local gone = redis.call('ZREMRANGEBYSCORE', key, '0', string.format('%d', cut))
  redis.call('ZREMRANGEBYSCORE', key, string.format('%d', -(now - TOMB)), '-1')
  local add = math.min(inc, math.max(MAXLOG - count, 0))
  if add > 0 then
    logAdd(key, now, add)
  end
  local drop = math.min(dec, count + add)
  if drop > 0 then
    local v
    if N == 1 then
      v = redis.call('ZRANGEBYSCORE', key, string.format('(%d', cut), '+inf', 'LIMIT', 0, drop)
    else
      v = redis.call('ZREVRANGEBYSCORE', key, '+inf', string.format('(%d', cut), 'LIMIT', 0, drop)
    end
    local tomb = { 'ZADD', key }
    for x = 1, #v do
      tomb[#tomb + 1] = string.format('%d', -now)
      tomb[#tomb + 1] = '~' .. v[x]
    end
    redis.call('ZREM', key, unpack(v))
    redis.call(unpack(tomb))
  end
  local c = count + add - drop
  local ttl = TOMB
  if c > 0 then
    ttl = logNewest(key) + w - now
    if drop > 0 then
      ttl = math.max(ttl, TOMB)
    end
  end
  if (c > 0 or drop > 0) and (gone > 0 or add > 0 or drop > 0) then
    redis.call('PEXPIRE', key, string.format('%d', ttl))
  end
  -- n2 = add + drop tells the caller that the log changed even when its
  -- count did not, so that it reports the new state.
  return key, c, add + drop, now, add * 4096 + drop
end

local function logReport(key, count, _, w, L, allowed)
  if count == 0 then
    if allowed then
      return L, 0
    end
    return 0, 0
  end
  local reset = logNewest(key) + w - now
  if not allowed or count >= L then
    return 0, reset
  end
  return L - count, reset
end

-- undo puts back the members a call at time t removed, then removes the
-- ones it added (the newest of time t).
local function logUndo(key, w, t, token)
  if token == 0 then
    return 0
  end
  local add = math.floor(token / 4096)
  local tombs = redis.call('ZRANGEBYSCORE', key, string.format('%d', -t), string.format('%d', -t))
  if #tombs > 0 then
    local back = { 'ZADD', key }
    for x = 1, #tombs do
      local m = string.sub(tombs[x], 2)
      back[#back + 1] = string.match(m, '^(%-?%d+):')
      back[#back + 1] = m
    end
    redis.call('ZREM', key, unpack(tombs))
    redis.call(unpack(back))
  end
  if add > 0 then
    local v = redis.call('ZREVRANGEBYSCORE', key, t, t, 'LIMIT', 0, add)
    if #v > 0 then
      redis.call('ZREM', key, unpack(v))
    end
  end
  if redis.call('ZCOUNT', key, string.format('(%d', now - w), '+inf') > 0 then
    redis.call('PEXPIRE', key, string.format('%d', logNewest(key) + w - now))
  else
    redis.call('DEL', key)
  end
  return 1
end

------------------------------------------------------------------------------
-- The registry, indexed by limiter.Algorithm; sub is sliding_window's entry
-- for N > 1, and oldest marks the log whose refunds release the oldest.
local subwindows = { read = subRead, decide = subDecide, write = subWrite, report = subReport, undo = subUndo }
local algorithms = {
  [0] = { read = slidingRead, decide = slidingDecide, write = slidingWrite, report = slidingReport, undo = slidingUndo,
    sub = subwindows },
  [1] = { read = tokenRead, decide = tokenDecide, write = tokenWrite, report = tokenReport, undo = tokenUndo },
  [2] = { read = fixedRead, decide = fixedDecide, write = fixedWrite, report = fixedReport, undo = fixedUndo },
  [3] = { read = logRead, decide = logDecide, write = logWrite, report = logReport, undo = logUndo },
  [4] = { read = logRead, decide = logDecide, write = logWrite, report = logReport, undo = logUndo, oldest = true },
}

-- algorithm returns the section of algorithm a with N sub-windows, and the
-- N its functions take.
local function algorithm(a, N)
  local A = algorithms[tonumber(a)]
  if not A then
    error('sluice: unknown algorithm ' .. a)
  end
  if A.sub and N > 1 then
    return A.sub, N
  elseif A.oldest then
    return A, 1
  end
  return A, N
end

if mode == 'u' then
  if not redis.call('SET', KEYS[#KEYS], '1', 'NX', 'PX', ARGV[3]) then
    return -1
  end
  local changed = 0
  for k = 1, #KEYS - 1 do
    local b = 3 + (k - 1) * UNDO_ARGS
    local A, N = algorithm(ARGV[b + 1], tonumber(ARGV[b + 3]))
    changed = changed + A.undo(KEYS[k], tonumber(ARGV[b + 2]), tonumber(ARGV[b + 4]), tonumber(ARGV[b + 5]), N)
  end
  return changed
end

-- Modes "a" and "c". Per key: algorithm, window, sub-windows, stored state
-- (oa, o1, o2, ox), rolled state (ra, r1, r2), growth (inc, dec).
local nk = #KEYS
local hbase = 2 + KEY_ARGS * nk
local nh = (#ARGV - hbase) / HIT_ARGS
local alg, win, sub = {}, {}, {}
local oa, o1, o2, ox, ra, r1, r2, inc, dec = {}, {}, {}, {}, {}, {}, {}, {}, {}
for k = 1, nk do
  local b = 2 + (k - 1) * KEY_ARGS
  local A, N = algorithm(ARGV[b + 1], tonumber(ARGV[b + 3]))
  local w = tonumber(ARGV[b + 2])
  alg[k], win[k], sub[k], inc[k], dec[k] = A, w, N, 0, 0
  oa[k], o1[k], o2[k], ox[k], ra[k], r1[k], r2[k] = A.read(KEYS[k], w, N)
end

-- Every hit is decided with the growth its counter will take: the largest
-- hits among the non-refund hits on that counter (as limiter.Evaluate).
local hk, hL, hB, hf, odi = {}, {}, {}, {}, {}
for k = 1, nk do
  odi[k] = 0
end
for h = 1, nh do
  local b = hbase + (h - 1) * HIT_ARGS
  local k, L, B = tonumber(ARGV[b + 1]), tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3])
  local n, f = tonumber(ARGV[b + 4]), tonumber(ARGV[b + 5])
  hk[h], hL[h], hB[h], hf[h] = k, L, B, f
  if f % 2 == 1 then
    dec[k] = math.max(dec[k], n)
  else
    inc[k] = math.max(inc[k], n)
    if f >= 16 then
      odi[k] = math.max(odi[k], n)
    end
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
  elseif f >= 16 then
    -- overdraw: allowed while one more hit fits
    allowed[h], retry[h] = alg[k].decide(ra[k], r1[k], r2[k], win[k], hL[h], 1, hB[h], sub[k])
  elseif math.floor(f / 4) % 2 == 1 then
    allowed[h], retry[h] = false, win[k]
  else
    allowed[h], retry[h] = alg[k].decide(ra[k], r1[k], r2[k], win[k], hL[h], inc[k], hB[h], sub[k])
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
  local rem, reset = alg[k].report(ra[k], r1[k], r2[k], win[k], hL[h], ok, hB[h], sub[k])
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
-- hits (0, 0 for one left as it was). A counter with overdraw hits first
-- takes their largest, in every mode and outcome (a report cannot be
-- refused); its hits' "if denied" pair then describes that state, and an
-- admitting call writes the rest of its growth over it, so that the undo
-- token takes back only the rest.
local consume = admitted and mode == 'a'
local function remText(rem)
  if rem >= 9223372036854775808 then
    return string.format('%.0f', rem)
  end
  return rem
end
for k = 1, nk do
  local u1, u2 = 0, 0
  local first = nil -- the key's first hit, whose requests write takes
  if consume or odi[k] > 0 then
    for h = 1, nh do
      if hk[h] == k then
        first = h
        break
      end
    end
  end
  if first then
    local A, w, N = alg[k], win[k], sub[k]
    local at, c1, c2 = ra[k], r1[k], r2[k]
    if odi[k] > 0 then
      at, c1, c2 = A.write(KEYS[k], w, hL[first], at, c1, c2, odi[k], 0, oa[k], o1[k], o2[k], ox[k], hB[first], N)
      for h = 1, nh do
        if hk[h] == k then
          local rem, reset = A.report(at, c1, c2, w, hL[h], allowed[h], hB[h], N)
          out[7 * h - 1], out[7 * h] = remText(rem), reset -- hit h's 4th and 5th: 2 + 7*(h-1) + 4
        end
      end
      if consume then
        oa[k], o1[k], o2[k], ox[k], at, c1, c2 = A.read(KEYS[k], w, N)
      end
    end
    if consume then
      at, c1, c2, u1, u2 = A.write(KEYS[k], w, hL[first], at, c1, c2, inc[k] - odi[k], dec[k], oa[k], o1[k], o2[k], ox[k],
        hB[first], N)
      if at ~= ra[k] or c1 ~= r1[k] or c2 ~= r2[k] then
        for h = 1, nh do
          if hk[h] == k then
            local rem, reset = A.report(at, c1, c2, w, hL[h], allowed[h], hB[h], N)
            out[7 * h + 1], out[7 * h + 2] = remText(rem), reset -- hit h's 6th and 7th: 2 + 7*(h-1) + 6
          end
        end
      end
    end
  end
  out[o + 1], out[o + 2] = u1, u2
  o = o + 2
end
return out
