-- run decides one call: KEYS, ARGV and the reply are protocol.go's (the
-- F_ formats and K_, FL_ values above). Each entry is decided on one
-- general path: read its hits (readHits), decide them (decideHits), consume
-- and report per counter (settleKey), reply (replyHits); an undo is
-- undoEntry. Two fast paths for the commonest entries, plain hits (oneEntry,
-- plainEntry), pay for themselves, by the figures in their comments.
--
-- Leases (hot keys): an apply hit may ask for lease permits beyond its hits.
-- When the entry is admitted, its key's algorithm leases (ALGORITHMS'
-- lease) and the hit is its key's only hit, the counter grows by
-- g = min(lease, floor(remaining / 2)) more, counted in the current
-- (sub-)window like the hits; the reply gives g, and u1 names that window,
-- so the caller knows until when the permits may be spent (the end of that
-- window or sub-window: then every permit spent is a hit inside the
-- (sub-)window that counted it, and no window ever holds more than the
-- algorithm admits) and how to give back the unspent ones (an undo of u1,
-- unspent). Remaining and reset describe the counter before the lease.

-- The flags' tests: f % FL2_X >= FL_X says that f has FL_X.
local FL2_REFUND, FL2_SHADOW, FL2_EXCEEDS, FL2_QUOTA = 2 * FL_REFUND, 2 * FL_SHADOW, 2 * FL_EXCEEDS, 2 * FL_QUOTA
local FL2_OVERDRAW, FL2_COUNTDENIED, FL2_SLOT, FL2_CEILING = 2 * FL_OVERDRAW, 2 * FL_COUNTDENIED, 2 * FL_SLOT, 2 * FL_CEILING

-- bind binds the library functions the hot path calls, runs each
-- algorithm's own bind (what its file binds on the first call) and
-- resolves the algorithms registered like others, on the first call.
local function bind()
  spack, sunpack, floor, min, max = struct.pack, struct.unpack, math.floor, math.min, math.max
  fmt, sub, byte = string.format, string.sub, string.byte
  for n = 0, NALGORITHMS - 1 do
    local A = ALG[n]
    if A and A.bind then
      A.bind()
    end
    if A and A.sub and A.sub.bind then
      A.sub.bind()
    end
  end
  resolve()
end

-- clock sets now: arg, or Redis TIME for "".
local function clock(arg)
  if arg ~= '' then
    now = tonumber(arg)
    return
  end
  -- Needed before writing after a non-deterministic command on Redis < 5;
  -- a no-op (deprecated) on 7.
  if redis.replicate_commands then
    redis.replicate_commands()
  end
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + floor(tonumber(t[2]) / 1000)
end

-- readSpecs reads the nk keys' F_SPEC: each key's algorithm (its variant
-- for N > 1 sub-windows; the logs' N says whether entries are slots named
-- by tokens), window and sub-windows (a calendar's bounds instead: its
-- variant, fixed_calendar.lua), and clears what the call reads of its keys.
-- It lists the keys whose algorithm parses its state from a string (pidx,
-- pnames) for prefetch, and returns their number.
local function readSpecs(KEYS, specs, nk)
  local p, n = 1, 0
  ALG.pen.reset()
  for k = 1, nk do
    local a, w, N
    a, w, N, p = sunpack(F_SPEC, specs, p)
    ox[k], dirty[k], mark[k] = 0, 0, 0
    if a == MARKER then
      keyAlg[k] = 0
    else
      local pen = a >= 64 -- fmtPenalty follows (penalty.lua)
      if pen then
        a = a - 64
      end
      local A = ALG[a]
      if not A then
        error('sluice: unknown algorithm ' .. a)
      end
      if A.cal and N > 0 then
        A, N, p = A.cal, A.cal.bounds(specs, p, N)
      elseif A.sub and N > 1 then
        A = A.sub
      elseif A.inflight then
        N = 1
      end
      keyAlg[k], keyWindow[k], keySubs[k] = A, w, N
      if pen then
        p = ALG.pen.spec(specs, p, k)
      end
      if A.parse then
        n = n + 1
        pidx[n], pnames[n] = k, KEYS[k]
      end
    end
  end
  return n
end

-- prefetch loads and rolls the n keys readSpecs listed, whose algorithm can
-- parse its state from a string, with one MGET per PREFETCH keys: a
-- redis.call costs about as much as the rest of a decision, so a batch pays
-- one read instead of one per counter. The keys it loads are not loaded
-- again (ox).
local PREFETCH = 1000
local function prefetch(n)
  for from = 1, n, PREFETCH do
    local to = min(from + PREFETCH - 1, n)
    local vals = redis.call('MGET', unpack(pnames, from, to))
    for x = from, to do
      local k = pidx[x]
      local A = keyAlg[k]
      A.parse(k, vals[x - from + 1])
      A.roll(k)
    end
  end
end

-- load loads and rolls key k (callers test ox[k] == 0 first: the call
-- has not loaded it, which prefetch makes rare).
local function load(KEYS, k)
  local A = keyAlg[k]
  A.load(k, KEYS[k])
  A.roll(k)
end

-- undoEntry decides the undo of count counters at p (after its F_ENTRY)
-- and returns where the next entry starts and its reply (F_UNDONE): with a
-- marker that exists already, it changes nothing.
local function undoEntry(KEYS, prog, p, count)
  local m, ttl
  m, ttl, p = sunpack(F_UNDO, prog, p)
  if m > 0 and not redis.call('SET', KEYS[m], '1', 'NX', 'PX', fmt('%d', ttl)) then
    return p + Z_UNDOKEY * count, spack(F_UNDONE, UNDO_RAN)
  end
  local changed = 0
  for _ = 1, count do
    local k, u1, u2
    k, u1, u2, p = sunpack(F_UNDOKEY, prog, p)
    if ox[k] == 0 then
      load(KEYS, k)
    end
    if keyAlg[k].undo(k, u1, u2) == 1 then
      dirty[k] = true
      changed = changed + 1
    end
  end
  return p, spack(F_UNDONE, changed)
end

-- readHits reads the count hits at p of entry e (hitKey..hitLease, hitCap: key, requests,
-- burst, hits, flags, lease, a pool's class's capacity), its keys in order of first hit (ek, with
-- mark[k] = e) and per key its growth: inc, the largest hits among its
-- non-refund hits (as limiter.Evaluate), dec, the largest refund, odi, the
-- largest overdraw or count-denied hits, the largest slot tokens of its
-- acquires and of its releases (tka, tkr), the lease asked and the key's
-- first hit. It returns where the next entry starts and the entry's number
-- of keys.
local function readHits(KEYS, prog, p, count, e)
  local nek = 0
  for h = 1, count do
    local k, f, n, c, tk
    k, hitLimit[h], hitBurst[h], n, f, hitLease[h], c, tk, p = sunpack(F_HIT, prog, p)
    hitKey[h], hitN[h], hitFlags[h] = k, n, f
    if f % FL2_CEILING < FL_CEILING then
      c = nil -- no pool's class
    end
    hitCap[h] = c
    if mark[k] ~= e then
      mark[k] = e
      nek = nek + 1
      ek[nek] = k
      inc[k], dec[k], odi[k], tka[k], tkr[k], ask[k], first[k] = 0, 0, 0, 0, 0, hitLease[h], h
      if ox[k] == 0 then
        load(KEYS, k)
      end
      ALG.pen.load(KEYS, k)
    else
      ask[k] = 0 -- a lease needs its key's only hit
    end
    if f % FL2_REFUND >= FL_REFUND then
      dec[k], tkr[k] = max(dec[k], n), max(tkr[k], tk)
    else
      inc[k], tka[k] = max(inc[k], n), max(tka[k], tk)
      if (f % FL2_OVERDRAW >= FL_OVERDRAW or f % FL2_COUNTDENIED >= FL_COUNTDENIED) and n > odi[k] then
        odi[k] = n
      end
    end
  end
  return p, nek
end

-- decideHits decides the count hits read (ok, retry) and returns whether
-- the entry is admitted: no enforced (non-shadow, non-refund) hit outside
-- the quota group is denied, and the quota group, if it has enforced hits,
-- has one that is allowed (limiter.MarkOverLimit).
local function decideHits(count)
  local admitted, quotaSeen, quotaAllowed = true, false, false
  for h = 1, count do
    local k, f = hitKey[h], hitFlags[h]
    local A = keyAlg[k]
    if f == 0 then
      ok[h], retry[h] = A.decide(k, h, inc[k])
      ALG.pen.gate(h, k, 0)
      admitted = admitted and ok[h]
    else
      if f % FL2_REFUND >= FL_REFUND then
        ok[h], retry[h] = true, 0
      elseif f % FL2_OVERDRAW >= FL_OVERDRAW then
        -- overdraw: allowed while one more hit fits
        ok[h], retry[h] = A.decide(k, h, 1)
      elseif f % FL2_EXCEEDS >= FL_EXCEEDS then
        ok[h], retry[h] = false, keyWindow[k]
      else
        ok[h], retry[h] = A.decide(k, h, inc[k])
      end
      ALG.pen.gate(h, k, f)
      if f % FL2_REFUND < FL_REFUND and f % FL2_SHADOW < FL_SHADOW then
        if f % FL2_QUOTA >= FL_QUOTA then
          quotaSeen = true
          quotaAllowed = quotaAllowed or ok[h]
        elseif not ok[h] then
          admitted = false
        end
      end
    end
  end
  return admitted and (quotaAllowed or not quotaSeen)
end

-- reportKey reports the hits of key k from its first hit h1 on into the
-- "if admitted" pair (ra, ta) and, unless admitted, the "if denied" pair
-- (rd, td) too (a request not consumed reads the same state either way).
local function reportKey(k, h1, count, admitted)
  local A = keyAlg[k]
  for h = h1, count do
    if hitKey[h] == k then
      ra[h], ta[h] = A.report(k, h, ok[h])
      if not admitted then
        rd[h], td[h] = ra[h], ta[h]
      end
    end
  end
end

-- settleKey consumes key x of the entry when consume (an admitting apply):
-- the largest increment, then the largest refund, and a lease. A key with
-- overdraw or count-denied hits first takes their largest, in every kind
-- and outcome (a report cannot be refused; the peer's counting counts
-- denied hits), and an admitting apply adds the rest of its growth, so
-- that the undo token takes back only the rest. Its hits get the "if
-- denied" pair of the state before consume when denied (the counters as
-- the entry found them, those hits aside), and the "if admitted" pair after
-- it when consume. The undo tokens more that consume makes (a refund that
-- reached older windows) are xn[x] pairs of XU from xo[x] on.
local function settleKey(KEYS, x, count, consume, denied)
  local k = ek[x]
  local A, h1 = keyAlg[k], first[k]
  local u1, u2, g = 0, 0, 0
  if odi[k] > 0 then
    A.consume(k, odi[k], 0)
    dirty[k] = true
  end
  if denied then
    reportKey(k, h1, count, false)
  end
  xo[x] = nXU
  if consume then
    u1, u2 = A.consume(k, inc[k] - odi[k], dec[k], tka[k], tkr[k])
    dirty[k] = true
    reportKey(k, h1, count, true)
    if ask[k] > 0 and A.lease and hitFlags[h1] == 0 then
      g = min(ask[k], floor(ra[h1] / 2))
      if g > 0 then
        local g0 = s2[k]
        A.consume(k, g, 0)
        g = s2[k] - g0
      end
    end
  end
  tu1[x], tu2[x], tg[x], xn[x] = u1, u2, g, (nXU - xo[x]) / 2
end

-- replyHits appends the reply of an apply or check of count hits and nek
-- keys to out after out[nout] and returns its new length: full (F_ADMITTED,
-- F_HITFULL per hit, F_KEYFULL per key) or short (F_HITSHORT per hit, the
-- first packed with F_ADMITTED, and F_KEYLEASE per key when leased).
local function replyHits(count, nek, admitted, full, leased, consume, nout)
  local a = admitted and 1 or 0
  if full then
    nout = nout + 1
    out[nout] = spack(F_ADMITTED, a)
  end
  for h = 1, count do
    local f, bits = hitFlags[h], (ok[h] and 1 or 0) + ALG.pen.bit(h)
    if f % FL2_EXCEEDS >= FL_EXCEEDS and f % FL2_REFUND < FL_REFUND then
      bits = bits + 2
    end
    nout = nout + 1
    if full then
      out[nout] = spack(F_HITFULL, bits, retry[h], rd[h], td[h], ra[h], ta[h])
    elseif consume and h == 1 then
      out[nout] = spack(F_FIRSTSHORT, a, bits, retry[h], ra[h], ta[h])
    elseif consume then
      out[nout] = spack(F_HITSHORT, bits, retry[h], ra[h], ta[h])
    elseif h == 1 then
      out[nout] = spack(F_FIRSTSHORT, a, bits, retry[h], rd[h], td[h])
    else
      out[nout] = spack(F_HITSHORT, bits, retry[h], rd[h], td[h])
    end
  end
  for x = 1, (full or leased) and nek or 0 do
    nout = nout + 1
    if full then
      out[nout] = spack(F_KEYFULL, tu1[x], tu2[x], tg[x], xn[x])
      for j = xo[x] + 1, xo[x] + 2 * xn[x], 2 do
        nout = nout + 1
        out[nout] = spack(F_UNDOMORE, XU[j], XU[j + 1])
      end
    else
      out[nout] = spack(F_KEYLEASE, tu1[x], tg[x])
    end
  end
  return nout
end

-- oneEntry decides an apply of one plain hit (no flag, or only a pool's
-- class's FL_CEILING) at p with a short
-- reply, as plainEntry decides it but without its tables: the commonest
-- entry of all. It returns where the next entry starts and the reply. In
-- bench/script-cost.sh's steady state (single hits on the default sliding
-- window, 12 a call) plainEntry costs Redis 10% more instructions a decision
-- (71.7k against 65.1k), the general path 18% more (76.6k).
local function oneEntry(KEYS, prog, p)
  local k, n, fl
  k, hitLimit[1], hitBurst[1], n, fl, p = sunpack(F_HITONE, prog, p)
  if fl == FL_CEILING then
    hitCap[1] = sunpack(F_HITCEILING, prog, p + O_TAILCEILING)
  else
    hitCap[1] = nil
  end
  if ox[k] == 0 then
    load(KEYS, k)
  end
  local A = keyAlg[k]
  if A.hit then
    local r, t = A.hit(k, 1, n)
    if r then
      return p + Z_HITTAIL, spack(F_FIRSTSHORT, 1, 1, 0, r, t)
    end
  end
  local allowed, retry1 = A.decide(k, 1, n)
  if allowed then
    first[k] = 1
    A.consume(k, n, 0)
    dirty[k] = true
  end
  local r, t = A.report(k, 1, allowed)
  local bit = allowed and 1 or 0
  return p + Z_HITTAIL, spack(F_FIRSTSHORT, bit, bit, retry1, r, t)
end

-- plainEntry decides an apply of count plain hits (no flag, or only a
-- pool's class's FL_CEILING) on distinct counters at p with a short reply,
-- as the general path decides it but without its bookkeeping (per key
-- growth, overdraw, quota, the pair before consumption, undo tokens): the
-- commonest entry. It returns where the next entry starts and the reply's
-- new length, or nothing, having changed no counter, for an entry that is
-- not plain (its keys marked -e: readHits marks e). In bench/script-cost.sh's
-- steady state with requests of 3 descriptors (HITS=3, 12 a call) the
-- general path costs Redis 16% more instructions a decision (223.7k against
-- 193.5k).
local function plainEntry(KEYS, prog, p, count, nout, e)
  local admitted = true
  for h = 1, count do
    local k, f, C, _
    k, hitLimit[h], hitBurst[h], hitN[h], f, _, C, _, p = sunpack(F_HIT, prog, p)
    if (f ~= 0 and f ~= FL_CEILING) or mark[k] == -e then
      return nil
    end
    mark[k] = -e
    if f == 0 then
      C = nil
    end
    hitKey[h], hitCap[h] = k, C
    if ox[k] == 0 then
      load(KEYS, k)
    end
    local A = keyAlg[k]
    if A.fits and s2[k] + hitN[h] <= (C or hitLimit[h]) then
      ok[h], retry[h] = true, 0 -- decide's first test, inline
    else
      ok[h], retry[h] = A.decide(k, h, hitN[h])
      admitted = admitted and ok[h]
    end
  end
  local a = admitted and 1 or 0
  for h = 1, count do
    local k = hitKey[h]
    local A = keyAlg[k]
    local r, t
    if admitted and A.hit then
      r, t = A.hit(k, h, hitN[h])
    end
    if not r then
      if admitted then
        first[k] = h
        A.consume(k, hitN[h], 0)
        dirty[k] = true
      end
      r, t = A.report(k, h, ok[h])
    end
    nout = nout + 1
    if h == 1 then
      out[nout] = spack(F_FIRSTSHORT, a, ok[h] and 1 or 0, retry[h], r, t)
    else
      out[nout] = spack(F_HITSHORT, ok[h] and 1 or 0, retry[h], r, t)
    end
  end
  return p, nout
end

-- general decides an apply or check entry e of count hits at p on the
-- general path: read its hits, decide them, consume and report per
-- counter, reply. It returns where the next entry starts and the reply's
-- new length.
local function general(KEYS, prog, p, count, e, kind, full, leased, nout)
  local nek
  nXU = 0
  p, nek = readHits(KEYS, prog, p, count, e)
  local admitted = decideHits(count)
  if kind == K_APPLY then
    ALG.pen.offend(KEYS, count) -- a check only reads
  end
  local consume = admitted and kind == K_APPLY
  for x = 1, nek do
    settleKey(KEYS, x, count, consume, full or not consume)
  end
  ALG.pen.report(count)
  return p, replyHits(count, nek, admitted, full, leased, consume, nout)
end

-- The entry being decided, set by entries before it decides one: where it
-- starts in the program, its number and the reply's length before it.
local ep, ee, en = 1, 0, 1

-- entries decides the entries of prog from p on (numbered from e + 1),
-- appending their replies to out after out[nout], and returns the reply's
-- length. It records each entry's start (ep, ee, en) before deciding it, so
-- that run can make an error the entry raises that entry's reply alone and
-- go on with the next.
local function entries(KEYS, prog, p, e, nout)
  local plen = #prog
  while p <= plen do
    e = e + 1
    ep, ee, en = p, e, nout
    local kind, count
    kind, count, p = sunpack(F_ENTRY, prog, p)
    local full, leased = kind % (2 * K_FULL) >= K_FULL, kind >= K_LEASE
    kind = kind % K_FULL
    if kind == K_UNDO then
      nout = nout + 1
      p, out[nout] = undoEntry(KEYS, prog, p, count)
    elseif kind == K_APPLY and not full and not leased and count == 1 and byte(prog, p + O_HITFLAGS) % FL_CEILING == 0 then
      -- No flag but FL_CEILING, the highest (the flags sum to less than
      -- 2 * FL_CEILING).
      nout = nout + 1
      p, out[nout] = oneEntry(KEYS, prog, p)
    else
      local q, n
      if kind == K_APPLY and not full and not leased then
        q, n = plainEntry(KEYS, prog, p, count, nout, e)
      end
      if q then
        p, nout = q, n
      else
        p, nout = general(KEYS, prog, p, count, e, kind, full, leased, nout)
      end
    end
  end
  return nout
end

-- failed returns the reply of the entry at p in prog that raised err, and
-- where the next entry starts: F_ADMITTED FAILED (an apply or check) or
-- F_UNDONE UNDO_FAILED (an undo), then F_MESSAGE and the message.
local function failed(prog, p, err)
  if type(err) == 'table' then
    err = err.err -- a Redis error reply
  end
  local msg = sub(tostring(err), 1, MAX_MESSAGE)
  local kind, count, q = sunpack(F_ENTRY, prog, p)
  if kind % K_FULL == K_UNDO then
    return spack(F_UNDONE, UNDO_FAILED) .. spack(F_MESSAGE, #msg) .. msg, q + Z_UNDO + Z_UNDOKEY * count
  end
  return spack(F_ADMITTED, FAILED) .. spack(F_MESSAGE, #msg) .. msg, q + Z_HIT * count
end

-- run decides one call (see protocol.go). An entry that raises an error
-- (none should: the caller checks each entry's layout) gets that error as
-- its reply, and the others are decided as if it were not there (what it
-- changed in memory before the error, if anything, is written): the
-- entries run under one pcall, resumed after the entry that failed (a pcall
-- per entry costs every decision). The reply is out[1..nout].
local function run(KEYS, ARGV)
  if not spack then
    bind()
  end
  clock(ARGV[1])
  local nk = #KEYS
  prefetch(readSpecs(KEYS, ARGV[2], nk))
  local prog = ARGV[3]
  out[1] = spack(F_NOW, now)
  local e, nout, p = 0, 1, 1
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
      keyAlg[k].store(k, KEYS[k])
    end
  end
  return table.concat(out, '', 1, nout)
end
