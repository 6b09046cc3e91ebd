-- limiter.lua: every algorithm of pkg/limiter in one script, the Lua twin of
-- limiter.Evaluate. One call decides a batch: several independent requests
-- (entries) that concurrent decisions of one Sluice instance share, each all
-- or nothing on its own, one after another, as if each were its own call at
-- the same instant. Each hit is decided by its own algorithm's section, which
-- does the same float64 operations in the same order as its Go file (every
-- Lua number is a double), so both twins give the same answers bit for bit; a
-- differential test checks it, one request per call and several.
--
-- Atomic: Redis runs a script to completion with no other command in
-- between, so every entry reads, decides and writes its counters as one
-- indivisible step, whichever service instance sends it. Every key the
-- script touches is in KEYS, and all KEYS share one Cluster slot (the caller
-- batches per slot).
--
-- Loaded as a library (FUNCTION LOAD, Redis 7+) and called by FCALL, its
-- functions are created once, at load; run by EVALSHA (older Redis, or when
-- FUNCTION is refused), the whole file runs on every call. pkg/redis adds the
-- first line of the library (its name) or the last line of the script
-- (return run(KEYS, ARGV)). Either way a call pays for what it runs, so the
-- hot path avoids calls into C (each costs about as much as twenty Lua
-- instructions): the arguments and the reply are binary strings read and
-- written by struct, flags are read with %, and the counters of a batch are
-- each read once and written once.
--
-- Clock: one now for the whole batch, Redis TIME unless ARGV[1] gives one
-- (tests only). A counter's state is read on the batch's first use of it,
-- rolled to now once, changed in memory by each entry in turn, and written
-- at the end if it changed, with the TTL of its expiry (at most two windows
-- away for the windows and logs, when the bucket is full again for a token
-- bucket); a state that becomes empty is deleted, so no key exists without a
-- TTL. What a denied entry sees is never written (overdraw hits aside). The
-- logs (sliding_log, concurrency) are sorted sets, changed in place.
--
-- Arguments (all numbers little-endian; d a double, exact for whole numbers
-- below 2^53; every count and time is whole):
--   KEYS      every key of the batch, once each: counters, and the markers
--             of undo entries.
--   ARGV[1]   now in Unix ms, or "" for Redis TIME (production: every
--             instance then agrees on one clock).
--   ARGV[2]   per key, in KEYS order, '<BdB': the algorithm (the number of
--             limiter.Algorithm: 0 sliding_window, 1 token_bucket,
--             2 fixed_window, 3 sliding_log, 4 concurrency; 255 for a
--             marker), the window in ms, the sub-windows
--             (limiter.Limit.SubWindowCount: 1 or more for sliding_window).
--   ARGV[3]   the entries, one after another, each '<BH' kind and count;
--             the kind's bit 16 asks for the full reply, bit 32 says that a
--             hit asks for a lease:
--     kind 1 "apply": decide the request's count hits and consume only if
--       it is admitted: no enforced (non-shadow, non-refund) hit outside the
--       quota group is denied, and the quota group, if it has enforced hits,
--       has one that is allowed (limiter.MarkOverLimit). Per hit
--       '<HdddBd': key index (1-based into KEYS), requests, burst (a token
--       bucket's capacity, 0 for the others), hits, flags (1 refund,
--       2 shadow, 4 exceeds: the largest non-refund hits on that key are
--       over the limit's Capacity, compared in Go on uint64 because doubles
--       cannot; 8 quota; 16 overdraw: the hit is allowed while one more hit
--       fits, and its key grows by the largest overdraw hits even when the
--       request is denied), lease: permits asked beyond the hits (see
--       below).
--     kind 2 "check": as apply, but writes only what overdraw hits consume
--       (as a denied apply does); admitted says whether apply would have
--       admitted, and every token is 0, 0. For the slots of a Cluster
--       request that another slot already denied.
--     kind 3 "undo": take back what an admitting apply consumed (a Cluster
--       request another slot denied), or a lease's unspent permits.
--       '<Hd' the index of its marker key (0: none) and the marker's TTL
--       in ms, then per counter '<Hdd' key index and the token (u1, u2)
--       that the apply's reply gave. With a marker it is idempotent: the
--       first run sets the marker, a retry (its reply lost) changes nothing.
--   Reply     one binary string: '<d' now, then per entry:
--     apply, check, full: '<B' admitted, then per hit '<Bddddd': bits
--       (1 allowed, 2 exceeds), retry_after_ms, remaining and
--       reset_after_ms if denied, remaining and reset_after_ms if admitted;
--       then per key of the entry, in the order of its first hit, '<ddd':
--       the undo token (u1, u2; u2 = 0 when there is nothing to take back)
--       and the permits leased. The "if denied" pair describes the counters
--       as the entry found them (also what a denied request reports), the
--       "if admitted" pair after its consumption; the caller picks one,
--       because in a Cluster another slot's script may deny a request this
--       one admitted.
--     apply, short (a request in one slot: the entry's outcome is the
--       request's): '<B' admitted, then per hit '<Bddd': bits,
--       retry_after_ms and the pair of the outcome; then, if a hit asked
--       for a lease, per key '<dd': u1 and the permits leased.
--     undo: '<d' the number of counters changed, or -1 when the marker
--       existed: this undo already ran.
--     an entry that raised an error: '<BH' 255 (apply, check) or '<dH' -2
--       (undo), the length of the message, then the message. The other
--       entries of the call are decided as if it were not there (what it
--       changed in memory before the error, if anything, is written).
--
-- Leases (hot keys): an apply hit may ask for lease permits beyond its hits.
-- When the entry is admitted, its key's algorithm leases (sliding_window,
-- fixed_window) and the hit is its key's only hit, the counter grows by
-- g = min(lease, floor(remaining / 2)) more, counted in the current
-- (sub-)window like the hits; the reply gives g, and u1 names that window,
-- so the caller knows until when the permits may be spent (the end of that
-- window or sub-window: then every permit spent is a hit inside the
-- (sub-)window that counted it, and no window ever holds more than the
-- algorithm admits) and how to give back the unspent ones (an undo of u1,
-- unspent). Remaining and reset describe the counter before the lease.
--
-- An algorithm's section implements, on its state (s1, s2, s3: limiter.State's
-- At, N1, N2, or what the section says), with w the window in ms, L the
-- requests and B the burst of a hit (the key's first hit in consume) and N
-- the key's sub-windows (for the logs: 1 when a refund releases the oldest
-- entries, 0 the newest):
--   load(key, w, N) -> o1, o2, o3, exists: the stored state (0, 0, 0 for
--     none);
--   roll(o1, o2, o3, w, N) -> s1, s2, s3: the state at now (the Go twin's
--     roll);
--   decide(s1, s2, s3, w, L, n, B, N) -> ok, retry_ms;
--   consume(key, s1, s2, s3, w, L, inc, dec, B, N) -> s1, s2, s3, u1, u2:
--     the Go twin's consume, and the undo token;
--   report(s1, s2, s3, w, L, allowed, B, N) -> remaining (0 unless allowed),
--     reset_after_ms (the Go twin's report);
--   store(key, w, N, s1, s2, s3, o1, o2, o3, exists): write s over o, only
--     what changed, with its TTL, or delete an empty state;
--   undo(key, s1, s2, s3, w, N, u1, u2) -> s1, s2, s3, changed (0 or 1)
-- and is registered in ALG after the sections, under its limiter.Algorithm
-- number.
--
-- A counter's key may hold what no section wrote: another type, or a string
-- of another layout (a stray value under Sluice's prefix, or a build of
-- another layout). load and parse read it as no counter and store writes
-- over it (or load deletes it), rather than fail the call, which decides
-- other requests too.

local MAX = 4503599627370496 -- limiter.MaxCount, 2^52: counts stay exact doubles
local MAXLOG = 1000 -- limiter.MaxLogRequests
local TOMB = 1000
local MARKER = 255

-- The library functions the hot path calls, bound by run on its first call
-- (a library being loaded may not touch struct).
local spack, sunpack, floor, min, max, fmt, sub, byte

-- now is the batch's clock, set by run.
local now = 0

-- The tables run works in, made once when the library loads and reused by
-- every call (tables made per call cost, with their collection, more than
-- the decisions of a small batch; EVALSHA runs the whole file per call and
-- so makes them per call). Only indices a call sets first are read, and run
-- resets those it reads before setting (KA, ox, dirty, mark) for its keys.
-- Per key: section, window, sub-windows; stored state (o1-o3, ox: 0 until
-- loaded); current state (s1-s3); dirty (to store); per entry (see run)
-- the entry that last marked it and its growth, lease and first hit.
local KA, KW, KN, o1, o2, o3, ox, s1, s2, s3, dirty = {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}
local mark, inc, dec, odi, ask, first = {}, {}, {}, {}, {}, {}
-- Per hit of an entry and per key of an entry (see run); the reply's parts;
-- prefetch's keys.
local hk, hL, hB, hn, hf, hl, ok, retry, rd, td, ra, ta = {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}
local ek, tu1, tu2, tg, out = {}, {}, {}, {}, {}
local pidx, pnames = {}, {}

-- idiv is floor(a / b) for whole a >= 0 and b > 0 below 2^53, exact even
-- where the double division rounds (the Go twins divide in integers). The
-- window index of a clock is idiv(now, w).
local function idiv(a, b)
  local q = floor(a / b)
  local r = a - q * b
  if r < 0 then
    return q - 1
  elseif r >= b then
    return q + 1
  end
  return q
end

------------------------------------------------------------------------------
-- sliding_window, one sub-window (limiter.SlidingWindow = 0; sliding.go).
-- State: s1 = window index i, s2 = cur (hits in window i), s3 = prev (hits in
-- window i-1); one hash per counter with fields i, c and p (a missing c or p
-- is 0). e, the part of window i that has passed, is 0 when window i starts
-- later than now (the clock stepped back).

local function hashLoad(key)
  local v = redis.pcall('HMGET', key, 'i', 'c', 'p')
  if v.err then
    redis.call('DEL', key) -- not a hash
    return 0, 0, 0, false
  elseif not v[1] then
    return 0, 0, 0, false
  end
  local i, c, p = tonumber(v[1]), tonumber(v[2] or 0), tonumber(v[3] or 0)
  if not (i and c and p) or i ~= i or c ~= c or p ~= p then
    redis.call('DEL', key) -- not a counter's numbers
    return 0, 0, 0, false
  end
  return i, c, p, true
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
local function swRoll(i, c, p, w)
  local idx = idiv(now, w)
  if i == idx or (i > idx and (c ~= 0 or p ~= 0)) then
    return i, c, p
  elseif i == idx - 1 then
    return idx, 0, c
  end
  return idx, 0, 0
end

-- decide: admit iff p*(W-E) + (c+n)*W <= L*W.
local function swDecide(at, cur, prev, w, L, n)
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

-- consume: cur grows by inc, saturating at MAX, then shrinks by dec, never
-- below 0. The undo token is the window index and the hits added to cur.
local function swConsume(_, i, cur, prev, _, _, inc, dec)
  local c = min(cur + inc, MAX)
  if dec >= c then
    c = 0
  else
    c = c - dec
  end
  return i, c, prev, i, c - cur
end

-- report is remaining (floor(L - estimate), at least 0; computed only for an
-- allowed hit) and resetAfter.
local function swReport(at, cur, prev, w, L, allowed)
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
local function swStore(key, w, _, i, c, p, oi, oc, op, exists)
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
local function swUndo(_, i, c, p, _, _, idx, delta)
  if delta == 0 then
    return i, c, p, 0
  end
  if i == idx then
    return i, min(max(c - delta, 0), MAX), p, 1
  elseif i == idx + 1 then
    return i, c, min(max(p - delta, 0), MAX), 1
  end
  return i, c, p, 0
end

------------------------------------------------------------------------------
-- sliding_window with N > 1 sub-windows (sliding_sub.go). The sub-window
-- index is j = floor(now / s) with s = w / N. One string per counter: N
-- slots, newest first, slot i the count of sub-window at - i, each W bytes
-- (1, 2 or 4: an unsigned integer, little-endian; 8: a double), then the
-- head '<dddBB': at (the sub-window of the state, s1), the total of all
-- counts (s2), cur (the count of sub-window at, which may be 0), W and a
-- salt byte. W holds every slot's count: 1 for a new string, wider when a
-- count that moves into the slots needs it, narrowest again when a rare
-- path (undo, widening) rebuilds the string whole. In memory
-- s3 is that string; after a roll its head may be stale (at0 < at, d = at -
-- at0 <= N): its slots and cur then describe sub-windows at0 - N .. at0,
-- of which those older than at - N (slots N - d + 1 .. N) left the estimate
-- (s2, the rolled total, no longer counts them). The total is never more
-- than MAX (consume saturates it), so it is exact, and equal to the Go
-- twin's sum oldest first.
--
-- Why this layout: Redis's Lua hashes every byte of every string it makes
-- (the MGET's values, what struct.pack returns) and copies them byte by
-- byte, so each decision's cost grows with the bytes of its counter: the
-- slots are as narrow as their counts, and a decision makes one new string,
-- the one it writes, with one struct.pack that copies the kept slots as a
-- prefix of the old string ('c'). The salt, different from string to string,
-- keeps strings that differ in few bytes from sharing a hash chain on a
-- Lua whose hash samples bytes (upstream Lua 5.1).

local SUBR = { [1] = '<B', [2] = '<H', [4] = '<I4', [8] = '<d' }
local SUBW = { [1] = 'B', [2] = 'H', [4] = 'I4', [8] = 'd' }

-- salt is the last byte of the next string written; SUBZERO is zero bytes
-- to copy empty slots from (made by run with its bindings); SUBFMT caches
-- pack formats.
local salt, SUBZERO, SUBFMT = 0, nil, {}

-- subWidth is W for a largest count c.
local function subWidth(c)
  if c < 256 then
    return 1
  elseif c < 65536 then
    return 2
  elseif c < 4294967296 then
    return 4
  end
  return 8
end

-- subShift is the pack format of a string whose head moved d >= 1 sub-windows
-- on from at0: d - 1 empty slots, slot d (at0's count), the first N - d of
-- the old ones, then the head.
local function subShift(W, N, d)
  local key = W * 4096 + N * 64 + d
  local f = SUBFMT[key]
  if not f then
    f = '<'
    if d > 1 then
      f = f .. 'c' .. (d - 1) * W
    end
    f = f .. SUBW[W]
    if d < N then
      f = f .. 'c' .. (N - d) * W
    end
    f = f .. 'dddBB'
    SUBFMT[key] = f
  end
  return f
end

-- subSame is the pack format that keeps all N slots of width W.
local function subSame(W, N)
  local key = W * 4096 + N * 64
  local f = SUBFMT[key]
  if not f then
    f = '<c' .. N * W .. 'dddBB'
    SUBFMT[key] = f
  end
  return f
end

-- parse reads a stored string (false: none; one of another layout: none,
-- written over); run reads every such key of the batch with one MGET (see
-- prefetch), load one alone.
local function subParse(v, N)
  if not v then
    return 0, 0, '', false
  end
  local W = #v > 26 and byte(v, #v - 1)
  if not SUBW[W] or #v ~= N * W + 26 then
    return 0, 0, '', true
  end
  local at, total = sunpack('<dd', v, #v - 25)
  return at, total, v, true
end

local function subLoad(key, _, N)
  return subParse(redis.call('GET', key), N)
end

-- subHead is a non-empty string's at0, cur and W.
local function subHead(v)
  local at0, _, cur, W = sunpack('<dddB', v, #v - 25)
  return at0, cur, W
end

-- roll moves the state to sub-window j: the total loses the slots that
-- left the estimate (older than j - N); the string stays as it is.
local function subRoll(at, total, v, w, N)
  local j = idiv(now, w / N)
  if at == j or (at > j and total ~= 0) then
    return at, total, v
  elseif total == 0 or at > j or j - at > N then
    return j, 0, ''
  end
  local W = byte(v, #v - 1)
  local r = SUBR[W]
  for i = N - (j - at) + 1, N do
    total = total - sunpack(r, v, (i - 1) * W + 1)
  end
  if total == 0 then
    return j, 0, ''
  end
  return j, total, v
end

-- decide admits n iff total + n <= L; otherwise the retry is the time until
-- enough of the oldest sub-windows have left the estimate.
local function subDecide(at, total, v, w, L, n, _, N)
  if total + n <= L then
    return true, 0
  end
  local s = w / N
  local e = now - at * s
  if e < 0 then
    e = 0
  end
  if v == '' then
    return false, (N + 1) * s - e
  end
  local at0, cur, W = subHead(v)
  local r, rest = SUBR[W], total
  for i = N - (at - at0), 1, -1 do
    local c = sunpack(r, v, (i - 1) * W + 1)
    if c ~= 0 then
      rest = rest - c
      if rest + n <= L then
        return false, ((N - (at - at0 + i)) + 1) * s - e
      end
    end
  end
  if cur ~= 0 and rest - cur + n <= L then
    return false, ((N - (at - at0)) + 1) * s - e
  end
  return false, (N + 1) * s - e
end

-- newest is the sub-window of the newest hits of a non-empty state.
local function subNewest(v, N)
  local at0, cur, W = subHead(v)
  if cur ~= 0 then
    return at0
  end
  local r = SUBR[W]
  for i = 1, N do
    if sunpack(r, v, (i - 1) * W + 1) ~= 0 then
      return at0 - i
    end
  end
  return at0 - N
end

-- subEncode writes the state at sub-window at whose counts, newest first,
-- are cs (cs[1] is at's, cs[i + 1] sub-window at - i's; missing ones are 0).
-- For the rare paths (undo, a count too wide for its slots).
local function subEncode(at, total, cs, N)
  local big = 0
  for i = 2, N + 1 do
    big = max(big, cs[i] or 0)
  end
  local W = subWidth(big)
  local parts = {}
  for i = 2, N + 1 do
    parts[i - 1] = spack('<' .. SUBW[W], cs[i] or 0)
  end
  salt = (salt + 1) % 256
  parts[N + 1] = spack('<dddBB', at, total, cs[1] or 0, W, salt)
  return table.concat(parts)
end

-- subCounts is the counts of v at sub-window at, newest first (subEncode's
-- cs), of the sub-windows in the estimate.
local function subCounts(at, v, N)
  local cs = { 0 }
  if v == '' then
    return cs
  end
  local at0, cur, W = subHead(v)
  local d, r = at - at0, SUBR[W]
  cs[d + 1] = cur
  for i = 1, N - d do
    cs[d + i + 1] = sunpack(r, v, (i - 1) * W + 1)
  end
  return cs
end

-- consume: the current sub-window (at) grows by inc, the total saturating at
-- MAX, then shrinks by dec, never below 0. The undo token is the sub-window
-- and what it gained. A stale string is rewritten at at even when nothing
-- changed (what consume returns is written, as the Go twin stores it).
local function subConsume(_, at, total, v, _, _, inc, dec, _, N)
  local at0, cur0, W, cur = at, 0, 1, 0
  if v ~= '' then
    at0, cur0, W = subHead(v)
    if at0 == at then
      cur = cur0
    end
  end
  local rest = total - cur
  local c = min(cur + inc, MAX - rest)
  if dec >= c then
    c = 0
  else
    c = c - dec
  end
  local t = rest + c
  if c == cur and at0 == at then
    return at, total, v, at, 0
  elseif t == 0 then
    return at, 0, '', at, c - cur
  end
  salt = (salt + 1) % 256
  if v == '' then
    return at, t, spack(subSame(1, N), SUBZERO, at, t, c, 1, salt), at, c - cur
  elseif at0 == at then
    return at, t, spack(subSame(W, N), v, at, t, c, W, salt), at, c - cur
  elseif subWidth(cur0) > W then
    local cs = subCounts(at, v, N)
    cs[1] = c
    return at, t, subEncode(at, t, cs, N), at, c - cur
  end
  local d = at - at0
  local f = subShift(W, N, d)
  if d == 1 then
    return at, t, spack(f, cur0, v, at, t, c, W, salt), at, c - cur
  end
  if d < N then
    return at, t, spack(f, SUBZERO, cur0, v, at, t, c, W, salt), at, c - cur
  end
  return at, t, spack(f, SUBZERO, cur0, at, t, c, W, salt), at, c - cur
end

-- report: remaining is L - total, at least 0; the reset is the time until
-- the newest sub-window holding hits leaves the estimate.
local function subReport(at, total, v, w, L, allowed, _, N)
  local reset = 0
  if total ~= 0 then
    local s = w / N
    local e = now - at * s
    if e < 0 then
      e = 0
    end
    reset = ((N - (at - subNewest(v, N))) + 1) * s - e
  end
  if not allowed then
    return 0, reset
  end
  local r = L - total
  if r <= 0 then
    return 0, reset
  end
  return r, reset
end

-- store: the TTL is when the newest sub-window holding hits leaves the
-- estimate (limiter's subExpires).
local function subStore(key, w, N, _, total, v, _, _, ov, exists)
  if v == ov then
    return
  elseif total == 0 then
    if exists then
      redis.call('DEL', key)
    end
    return
  end
  redis.call('SET', key, v, 'PX', fmt('%d', (subNewest(v, N) + N + 1) * (w / N) - now))
end

-- undo subtracts delta from sub-window idx while the estimate counts it,
-- and puts back what a refund took from a sub-window it emptied. Rare: it
-- decodes and encodes every slot.
local function subUndo(_, at, total, v, _, N, idx, delta)
  if delta == 0 or idx > at or idx < at - N then
    return at, total, v, 0
  end
  local cs = subCounts(at, v, N)
  local x = at - idx + 1
  local old = cs[x] or 0
  if old == 0 and delta > 0 then
    return at, total, v, 0
  end
  local c = min(max(old - delta, 0), MAX - (total - old))
  cs[x] = c
  total = total - old + c
  if total == 0 then
    return at, 0, '', 1
  end
  return at, total, subEncode(at, total, cs, N), 1
end

------------------------------------------------------------------------------
-- token_bucket (limiter.TokenBucket = 1; token.go): GCRA. One 24-byte string
-- per counter, '<ddd': t, f and d, the theoretical arrival time TAT = t + f/d
-- ms (a string, as fixed_window's, for the batch's MGET and one SET). With
-- g = gcd(L, w), rp = L/g and wp = w/g, a token is wp ticks of 1/rp ms;
-- every number stays a whole double below 2^53 (the Go twin's Validate), so
-- both twins compute the same integers. Its state needs no roll.

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
  return min(dt * rp + f, MAX)
end

local function tokenParse(v)
  if not v then
    return 0, 0, 0, false
  elseif #v ~= 24 then
    return 0, 0, 0, true
  end
  local t, f, d = sunpack('<ddd', v)
  if t ~= t or f ~= f or d ~= d then
    return 0, 0, 0, true -- NaN: not a counter
  end
  return t, f, d, true
end

local function tokenLoad(key)
  return tokenParse(redis.call('GET', key))
end

local function tokenRoll(t, f, d)
  return t, f, d
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

-- consume adds inc tokens of debt (saturating at MAX ticks), then takes dec
-- back, never below a full bucket. The undo token is rp and the debt added.
local function tokenConsume(_, t, f, d, w, L, inc, dec, B)
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

-- store writes (t, f, d) with the TTL of the TAT, or deletes the key for a
-- full bucket.
local function tokenStore(key, _, _, t, f, d, ot, of, od, exists)
  if t == ot and f == of and d == od and exists then
    return
  end
  if t == 0 and f == 0 and d == 0 then
    if exists then
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
local function tokenUndo(_, t, f, d, _, _, rp, delta)
  if delta == 0 or d ~= 0 and d ~= rp then
    return t, f, d, 0
  end
  local D = 0
  if d ~= 0 then
    D = tokenDebt(t, f, d, rp)
  end
  local nt, nf, nd = tokenState(min(max(D - delta, 0), MAX), rp)
  return nt, nf, nd, 1
end

------------------------------------------------------------------------------
-- fixed_window (limiter.FixedWindow = 2; fixed.go): one 16-byte string per
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

local function fixedStore(key, w, _, i, c, _, oi, oc, _, exists)
  if i == oi and c == oc and exists then
    return
  elseif c == 0 then
    if exists then
      redis.call('DEL', key)
    end
    return
  end
  redis.call('SET', key, spack('<dd', i, c), 'PX', fmt('%d', (i + 1) * w - now))
end

local function fixedUndo(_, i, c, p, _, _, idx, delta)
  if delta == 0 or i ~= idx then
    return i, c, p, 0
  end
  return i, min(max(c - delta, 0), MAX), p, 1
end

------------------------------------------------------------------------------
-- sliding_log (3) and concurrency (4) (log.go): a sorted set per counter, one
-- member per counted hit, scored by its time; members are "<time>:<index>",
-- the index (4 digits, so that members of one time sort by it) one more than
-- the largest of that time. The state is s1 = the key, s2 = the count in
-- (now - w, now], s3 = the members changed by the last consume (so that a
-- change shows even when the count does not); consume and undo change the
-- set in place, store writes nothing.
--
-- A refund's removed members stay TOMB ms as tombstones, "~" and the member
-- scored -now (below every live time, so no read sees them), so that an
-- undo can put them back at their own times: the undo token is now and
-- added * 4096 + removed (each at most MAXLOG).

-- logTime is a member's score as a time: now for a score that is no
-- finite number (a stray member's: +inf), so that it counts as a hit of
-- now and leaves the log with it.
local function logTime(score)
  local t = tonumber(score)
  if not t or t - t ~= 0 then
    return now
  end
  return t
end

-- logNewest is the time of the newest live member of key (count > 0).
local function logNewest(key)
  local v = redis.call('ZREVRANGEBYSCORE', key, '+inf', '(0', 'WITHSCORES', 'LIMIT', 0, 1)
  return logTime(v[2])
end

local function logCount(key, w)
  return redis.call('ZCOUNT', key, fmt('(%d', now - w), '+inf')
end

local function logLoad(key, w)
  local n = redis.pcall('ZCOUNT', key, fmt('(%d', now - w), '+inf')
  if type(n) == 'table' then
    redis.call('DEL', key) -- not a sorted set
    n = 0
  end
  return key, n, 0, true
end

local function logRoll(key, count)
  return key, count, 0
end

local function logDecide(key, count, _, w, L, n)
  if count + n <= L then
    return true, 0
  end
  local v = redis.call('ZRANGEBYSCORE', key, fmt('(%d', now - w), '+inf', 'WITHSCORES', 'LIMIT', count + n - L - 1, 1)
  return false, logTime(v[2]) + w - now
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
    args[#args + 1] = fmt('%d', t)
    args[#args + 1] = fmt('%d:%04d', t, base + x)
  end
  redis.call(unpack(args))
end

-- consume adds inc entries at now (the log holding at most MAXLOG), then
-- removes dec: the newest (N = 0) or the oldest (N = 1).
local function logConsume(key, _, count, _, w, _, inc, dec, _, N)
  local cut = now - w
  local gone = redis.call('ZREMRANGEBYSCORE', key, '0', fmt('%d', cut))
  redis.call('ZREMRANGEBYSCORE', key, fmt('%d', -(now - TOMB)), '-1')
  local add = min(inc, max(MAXLOG - count, 0))
  if add > 0 then
    logAdd(key, now, add)
  end
  local drop = min(dec, count + add)
  if drop > 0 then
    local v
    if N == 1 then
      v = redis.call('ZRANGEBYSCORE', key, fmt('(%d', cut), '+inf', 'LIMIT', 0, drop)
    else
      v = redis.call('ZREVRANGEBYSCORE', key, '+inf', fmt('(%d', cut), 'LIMIT', 0, drop)
    end
    local tomb = { 'ZADD', key }
    for x = 1, #v do
      tomb[#tomb + 1] = fmt('%d', -now)
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
      ttl = max(ttl, TOMB)
    end
  end
  if (c > 0 or drop > 0) and (gone > 0 or add > 0 or drop > 0) then
    redis.call('PEXPIRE', key, fmt('%d', ttl))
  end
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

local function logStore()
end

-- undo puts back the members a consume at time t removed, then removes the
-- ones it added (the newest of time t).
local function logUndo(key, _, count, _, w, _, t, token)
  if token == 0 then
    return key, count, 0, 0
  end
  local add = floor(token / 4096)
  local tombs = redis.call('ZRANGEBYSCORE', key, fmt('%d', -t), fmt('%d', -t))
  if #tombs > 0 then
    local back = { 'ZADD', key }
    for x = 1, #tombs do
      local m = sub(tombs[x], 2)
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
  local c = logCount(key, w)
  if c > 0 then
    redis.call('PEXPIRE', key, fmt('%d', logNewest(key) + w - now))
  else
    redis.call('DEL', key)
  end
  return key, c, 0, 1
end

------------------------------------------------------------------------------
-- The registry, indexed by limiter.Algorithm; sub is sliding_window's entry
-- for N > 1, oldest marks the log whose refunds release the oldest, lease
-- the algorithms that lease permits, parse those whose state is one string
-- (run reads them all with one MGET).
local ALG = {
  [0] = { load = hashLoad, roll = swRoll, decide = swDecide, consume = swConsume, report = swReport, store = swStore,
    undo = swUndo, lease = true,
    sub = { load = subLoad, parse = subParse, roll = subRoll, decide = subDecide, consume = subConsume,
      report = subReport, store = subStore, undo = subUndo, lease = true } },
  [1] = { load = tokenLoad, parse = tokenParse, roll = tokenRoll, decide = tokenDecide, consume = tokenConsume,
    report = tokenReport, store = tokenStore, undo = tokenUndo },
  [2] = { load = fixedLoad, parse = fixedParse, roll = fixedRoll, decide = fixedDecide, consume = swConsume,
    report = fixedReport, store = fixedStore, undo = fixedUndo, lease = true },
  [3] = { load = logLoad, roll = logRoll, decide = logDecide, consume = logConsume, report = logReport,
    store = logStore, undo = logUndo },
  [4] = { load = logLoad, roll = logRoll, decide = logDecide, consume = logConsume, report = logReport,
    store = logStore, undo = logUndo, oldest = true },
}

------------------------------------------------------------------------------
-- prefetch loads and rolls every key of the batch whose section can parse
-- its state from a string, with one MGET per PREFETCH keys: a redis.call
-- costs about as much as the rest of a decision, so a batch pays one read
-- instead of one per counter. The keys it loads are not loaded again (ox).
local PREFETCH = 1000
local function prefetch(KEYS, nk)
  local n = 0
  for k = 1, nk do
    local A = KA[k]
    if A ~= 0 and A.parse then
      n = n + 1
      pidx[n], pnames[n] = k, KEYS[k]
    end
  end
  for from = 1, n, PREFETCH do
    local to = min(from + PREFETCH - 1, n)
    local vals = redis.call('MGET', unpack(pnames, from, to))
    for x = from, to do
      local k = pidx[x]
      local A, w, N = KA[k], KW[k], KN[k]
      o1[k], o2[k], o3[k], ox[k] = A.parse(vals[x - from + 1], N)
      s1[k], s2[k], s3[k] = A.roll(o1[k], o2[k], o3[k], w, N)
    end
  end
end

------------------------------------------------------------------------------
-- plainHits says whether the count hits of an apply entry at p ('<HdddBd'
-- each) are plain (flags 0) and on distinct counters: run's fast path. It
-- marks their keys -e (the general path marks e).
local function plainHits(prog, p, count, e)
  for q = p, p + 35 * (count - 1), 35 do
    local k = byte(prog, q) + 256 * byte(prog, q + 1)
    if byte(prog, q + 26) ~= 0 or mark[k] == -e then
      return false
    end
    mark[k] = -e
  end
  return true
end

------------------------------------------------------------------------------
-- The entry being decided, set by entries before it decides one: where it
-- starts in the program, its number and the reply's length before it.
local ep, ee, en = 1, 0, 1

-- entries decides the entries of prog from p on (numbered from e + 1),
-- appending their replies to out after out[nout], and returns the reply's
-- length. Per entry: its hits (hk..ta: key, requests, burst, hits, flags,
-- lease, allowed, retry, the two remaining/reset pairs), its keys in order
-- of first hit (ek, with mark[k] = the entry's number), and per key the
-- growth (inc, dec, odi: the largest overdraw hits), the lease asked and the
-- key's first hit. It records each entry's start (ep, ee, en) before
-- deciding it, so that run can make an error the entry raises that entry's
-- reply alone and go on with the next.
local function entries(KEYS, prog, p, e, nout)
  local plen = #prog
  while p <= plen do
    e = e + 1
    ep, ee, en = p, e, nout
    local kind, count
    kind, count, p = sunpack('<BH', prog, p)
    local full, leased = kind % 32 >= 16, kind >= 32
    kind = kind % 16
    if kind == 3 then
      local m, ttl
      m, ttl, p = sunpack('<Hd', prog, p)
      if m > 0 and not redis.call('SET', KEYS[m], '1', 'NX', 'PX', fmt('%d', ttl)) then
        p = p + 18 * count
        nout = nout + 1
        out[nout] = spack('<d', -1)
      else
        local changed = 0
        for _ = 1, count do
          local k, u1, u2, ch
          k, u1, u2, p = sunpack('<Hdd', prog, p)
          local A, w, N = KA[k], KW[k], KN[k]
          if ox[k] == 0 then
            o1[k], o2[k], o3[k], ox[k] = A.load(KEYS[k], w, N)
            s1[k], s2[k], s3[k] = A.roll(o1[k], o2[k], o3[k], w, N)
          end
          s1[k], s2[k], s3[k], ch = A.undo(KEYS[k], s1[k], s2[k], s3[k], w, N, u1, u2)
          if ch == 1 then
            dirty[k] = true
            changed = changed + 1
          end
        end
        nout = nout + 1
        out[nout] = spack('<d', changed)
      end
    elseif kind == 1 and count == 1 and not full and not leased and byte(prog, p + 26) == 0 then
      -- The commonest entry, decided as the general path below decides it
      -- but without its tables: an apply of one plain hit (no flags, no
      -- lease), short reply.
      local k, L, B, n
      k, L, B, n, p = sunpack('<Hddd', prog, p)
      p = p + 9
      local A, w, N = KA[k], KW[k], KN[k]
      if ox[k] == 0 then
        o1[k], o2[k], o3[k], ox[k] = A.load(KEYS[k], w, N)
        s1[k], s2[k], s3[k] = A.roll(o1[k], o2[k], o3[k], w, N)
      end
      local a, b, c = s1[k], s2[k], s3[k]
      local allowed, retry1 = A.decide(a, b, c, w, L, n, B, N)
      if allowed then
        a, b, c = A.consume(KEYS[k], a, b, c, w, L, n, 0, B, N)
        s1[k], s2[k], s3[k], dirty[k] = a, b, c, true
      end
      local r, t = A.report(a, b, c, w, L, allowed, B, N)
      nout = nout + 1
      out[nout] = spack('<BBddd', allowed and 1 or 0, allowed and 1 or 0, retry1, r, t)
    elseif kind == 1 and not full and not leased and plainHits(prog, p, count, e) then
      -- The common entry of several descriptors, decided as the general
      -- path below decides it but without its bookkeeping: an apply of
      -- plain hits (no flags, no lease) on distinct counters, short reply.
      local admitted = true
      for h = 1, count do
        local k
        k, hL[h], hB[h], hn[h], p = sunpack('<Hddd', prog, p)
        p = p + 9
        hk[h] = k
        local A, w, N = KA[k], KW[k], KN[k]
        if ox[k] == 0 then
          o1[k], o2[k], o3[k], ox[k] = A.load(KEYS[k], w, N)
          s1[k], s2[k], s3[k] = A.roll(o1[k], o2[k], o3[k], w, N)
        end
        ok[h], retry[h] = A.decide(s1[k], s2[k], s3[k], w, hL[h], hn[h], hB[h], N)
        admitted = admitted and ok[h]
      end
      for h = 1, count do
        local k, L, B = hk[h], hL[h], hB[h]
        local A, w, N = KA[k], KW[k], KN[k]
        local r, t
        if admitted then
          s1[k], s2[k], s3[k] = A.consume(KEYS[k], s1[k], s2[k], s3[k], w, L, hn[h], 0, B, N)
          dirty[k] = true
        end
        r, t = A.report(s1[k], s2[k], s3[k], w, L, ok[h], B, N)
        nout = nout + 1
        if h == 1 then
          out[nout] = spack('<BBddd', admitted and 1 or 0, ok[h] and 1 or 0, retry[h], r, t)
        else
          out[nout] = spack('<Bddd', ok[h] and 1 or 0, retry[h], r, t)
        end
      end
    else
      -- Read the hits; every hit is decided with the growth its counter
      -- will take: the largest hits among its non-refund hits (as
      -- limiter.Evaluate).
      local nek = 0
      for h = 1, count do
        local k, f, n
        k, hL[h], hB[h], n, f, hl[h], p = sunpack('<HdddBd', prog, p)
        hk[h], hn[h], hf[h] = k, n, f
        if mark[k] ~= e then
          mark[k] = e
          nek = nek + 1
          ek[nek] = k
          inc[k], dec[k], odi[k], ask[k], first[k] = 0, 0, 0, hl[h], h
          if ox[k] == 0 then
            local A, w, N = KA[k], KW[k], KN[k]
            o1[k], o2[k], o3[k], ox[k] = A.load(KEYS[k], w, N)
            s1[k], s2[k], s3[k] = A.roll(o1[k], o2[k], o3[k], w, N)
          end
        else
          ask[k] = 0 -- a lease needs its key's only hit
        end
        if f % 2 == 1 then
          if n > dec[k] then
            dec[k] = n
          end
        else
          if n > inc[k] then
            inc[k] = n
          end
          if f >= 16 and n > odi[k] then
            odi[k] = n
          end
        end
      end

      local admitted, quotaSeen, quotaAllowed = true, false, false
      for h = 1, count do
        local k, f = hk[h], hf[h]
        local refund, shadow = f % 2 == 1, f % 4 >= 2
        if refund then
          ok[h], retry[h] = true, 0
        elseif f >= 16 then
          -- overdraw: allowed while one more hit fits
          ok[h], retry[h] = KA[k].decide(s1[k], s2[k], s3[k], KW[k], hL[h], 1, hB[h], KN[k])
        elseif f % 8 >= 4 then
          ok[h], retry[h] = false, KW[k]
        else
          ok[h], retry[h] = KA[k].decide(s1[k], s2[k], s3[k], KW[k], hL[h], inc[k], hB[h], KN[k])
        end
        if not refund and not shadow then
          if f % 16 >= 8 then
            quotaSeen = true
            quotaAllowed = quotaAllowed or ok[h]
          elseif not ok[h] then
            admitted = false
          end
        end
      end
      if quotaSeen and not quotaAllowed then
        admitted = false
      end

      -- Report as if nothing were consumed.
      for h = 1, count do
        local k = hk[h]
        rd[h], td[h] = KA[k].report(s1[k], s2[k], s3[k], KW[k], hL[h], ok[h], hB[h], KN[k])
        ra[h], ta[h] = rd[h], td[h]
      end

      -- Consume, when admitted by an apply: per counter the largest
      -- increment, then the largest refund; its hits get the "if admitted"
      -- pair of the new state. A counter with overdraw hits first takes
      -- their largest, in every kind and outcome (a report cannot be
      -- refused); its hits' "if denied" pair then describes that state, and
      -- an admitting apply adds the rest of its growth, so that the undo
      -- token takes back only the rest.
      local consume = admitted and kind == 1
      for x = 1, nek do
        local k = ek[x]
        local u1, u2, g = 0, 0, 0
        if consume or odi[k] > 0 then
          local A, w, N, h1 = KA[k], KW[k], KN[k], first[k]
          local a0, b0, c0 = s1[k], s2[k], s3[k]
          local key = KEYS[k]
          if odi[k] > 0 then
            s1[k], s2[k], s3[k] = A.consume(key, a0, b0, c0, w, hL[h1], odi[k], 0, hB[h1], N)
            dirty[k] = true
            for h = h1, count do
              if hk[h] == k then
                rd[h], td[h] = A.report(s1[k], s2[k], s3[k], w, hL[h], ok[h], hB[h], N)
                ra[h], ta[h] = rd[h], td[h]
              end
            end
            a0, b0, c0 = s1[k], s2[k], s3[k]
          end
          if consume then
            s1[k], s2[k], s3[k], u1, u2 = A.consume(key, a0, b0, c0, w, hL[h1], inc[k] - odi[k], dec[k], hB[h1], N)
            dirty[k] = true
            if s1[k] ~= a0 or s2[k] ~= b0 or s3[k] ~= c0 then
              for h = h1, count do
                if hk[h] == k then
                  ra[h], ta[h] = A.report(s1[k], s2[k], s3[k], w, hL[h], ok[h], hB[h], N)
                end
              end
            end
            if ask[k] > 0 and A.lease and hf[h1] == 0 then
              g = min(ask[k], floor(ra[h1] / 2))
              if g > 0 then
                local g0 = s2[k]
                s1[k], s2[k], s3[k] = A.consume(key, s1[k], s2[k], s3[k], w, hL[h1], g, 0, hB[h1], N)
                g = s2[k] - g0
              end
            end
          end
        end
        tu1[x], tu2[x], tg[x] = u1, u2, g
      end
      if full then
        nout = nout + 1
        out[nout] = spack('<B', admitted and 1 or 0)
      end
      for h = 1, count do
        local bits = ok[h] and 1 or 0
        if hf[h] % 8 >= 4 and hf[h] % 2 == 0 then
          bits = bits + 2
        end
        if full then
          nout = nout + 1
          out[nout] = spack('<Bddddd', bits, retry[h], rd[h], td[h], ra[h], ta[h])
        else
          local r, t = rd[h], td[h]
          if consume then
            r, t = ra[h], ta[h]
          end
          if h == 1 then
            nout = nout + 1
            out[nout] = spack('<BBddd', admitted and 1 or 0, bits, retry[h], r, t)
          else
            nout = nout + 1
            out[nout] = spack('<Bddd', bits, retry[h], r, t)
          end
        end
      end
      if full then
        for x = 1, nek do
          nout = nout + 1
          out[nout] = spack('<ddd', tu1[x], tu2[x], tg[x])
        end
      elseif leased then
        for x = 1, nek do
          nout = nout + 1
          out[nout] = spack('<dd', tu1[x], tg[x])
        end
      end
    end
  end
  return nout
end

-- failed returns the reply of the entry at p in prog that raised err, and
-- where the next entry starts: '<BH' 255 (an apply or check) or '<dH' -2 (an
-- undo) and the length of the message, then the message (at most 200
-- bytes).
local function failed(prog, p, err)
  if type(err) == 'table' then
    err = err.err -- a Redis error reply
  end
  local msg = sub(tostring(err), 1, 200)
  local kind, count = sunpack('<BH', prog, p)
  if kind == 3 then
    return spack('<dH', -2, #msg) .. msg, p + 13 + 18 * count
  end
  return spack('<BH', 255, #msg) .. msg, p + 3 + 35 * count
end

------------------------------------------------------------------------------
-- run decides one batch (see the header).
local function run(KEYS, ARGV)
  if not spack then
    spack, sunpack, floor, min, max = struct.pack, struct.unpack, math.floor, math.min, math.max
    fmt, sub, byte = string.format, string.sub, string.byte
    SUBZERO = string.rep('\0', 8 * 64)
  end
  if ARGV[1] ~= '' then
    now = tonumber(ARGV[1])
  else
    -- Needed before writing after a non-deterministic command on Redis < 5;
    -- a no-op (deprecated) on 7.
    if redis.replicate_commands then
      redis.replicate_commands()
    end
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000 + floor(tonumber(t[2]) / 1000)
  end
  local nk, specs, prog = #KEYS, ARGV[2], ARGV[3]
  for k = 1, nk do
    KA[k], ox[k], dirty[k], mark[k] = 0, 0, 0, 0
  end
  local p = 1
  for k = 1, nk do
    local a, w, N
    a, w, N, p = sunpack('<BdB', specs, p)
    if a ~= MARKER then
      local A = ALG[a]
      if not A then
        error('sluice: unknown algorithm ' .. a)
      end
      if A.sub and N > 1 then
        A = A.sub
      elseif A.oldest then
        N = 1
      end
      KA[k], KW[k], KN[k] = A, w, N
    end
  end
  prefetch(KEYS, nk)
  -- An entry that raises an error (none should: the caller checks each
  -- entry's layout) gets that error as its reply, and the others are
  -- decided as if it were not there: the entries run under one pcall,
  -- resumed after the entry that failed (a pcall per entry costs every
  -- decision). The reply is out[1..nout].
  out[1] = spack('<d', now)
  local e, nout = 0, 1
  p = 1
  while true do
    local done, n = pcall(entries, KEYS, prog, p, e, nout)
    if done then
      nout = n
      break
    end
    nout, e = en + 1, ee
    out[nout], p = failed(prog, ep, n)
  end
  for k = 1, nk do
    if dirty[k] == true then
      KA[k].store(KEYS[k], KW[k], KN[k], s1[k], s2[k], s3[k], o1[k], o2[k], o3[k], ox[k])
    end
  end
  return table.concat(out, '', 1, nout)
end
