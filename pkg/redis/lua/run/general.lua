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
