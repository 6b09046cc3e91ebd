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
