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
-- to copy empty slots from (made by bind, on run's first call); SUBFMT
-- caches pack formats (and, under -n, store's offset in a string of n
-- bytes).
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

-- subHead is a non-empty string's at0, cur, W and head's total for the
-- state (at, total) holding it. A plain hit in the string's own sub-window changes
-- only its total and cur, in memory and in Redis (store writes the two in
-- place): the string is not rebuilt, so while at is at0 its head's cur is
-- what it was when the string was read or built, and the hits since are
-- what the total gained since (nothing else changes the total at at0).
-- The last string's head is kept, and each key's stored string's head as
-- parse read it, or as subHit built it (HV, HA, HT, HC, HW: string, at0,
-- total, cur, W), for subHit and store, which read it per key, several
-- keys apart.
local subHead, subParse, subLoad, subHit, subStore, subNewest
do -- (in a block: the chunk has at most 200 locals at once)
  local hv, ha0, ht0, hcur, hW -- the last head read, and its string
  local HV, HA, HT, HC, HW = {}, {}, {}, {}, {}
  function subHead(v, at, total)
    if v ~= hv then -- a string is interned: == compares pointers
      hv, ha0, ht0, hcur, hW = v, sunpack('<dddB', v, #v - 25)
    end
    local at0, t0, cur, W = ha0, ht0, hcur, hW
    if at0 == at then
      cur = cur + (total - t0)
    end
    return at0, cur, W, t0
  end

  -- parse reads a stored string v (false: none; one of another layout:
  -- none, written over) of key k; run reads every such key of the batch
  -- with one MGET (see prefetch), load one alone. It keeps k's head (HV..HC).
  function subParse(k, v)
    local n = v and #v or 0
    local W = n > 26 and byte(v, n - 1)
    if not SUBW[W] or n ~= keySubs[k] * W + 26 then
      HV[k] = false
      o1[k], o2[k], o3[k], ox[k] = 0, 0, '', v and true or false
      return
    end
    local at, total, cur = sunpack('<ddd', v, n - 25)
    HV[k], HA[k], HT[k], HC[k], HW[k] = v, at, total, cur, W
    o1[k], o2[k], o3[k], ox[k] = at, total, v, true
  end

  function subLoad(k, key)
    subParse(k, redis.call('GET', key))
  end

  -- subHit decides, consumes and reports a plain hit h of n on key k on
  -- the commonest paths:
  -- admitted, in its stored string's own sub-window, which holds hits
  -- already (changed in place), or the first hit of a later one (subRoll
  -- left the string stale: a new string, subConsume's, whose head it keeps
  -- for store). It returns remaining and reset as decide, consume and
  -- report give them, from the head parse read, or nothing, having changed
  -- nothing, for any other case (the general path's).
  function subHit(k, h, n)
    local at, v, total = s1[k], s3[k], s2[k]
    local t = total + n
    local L = hitCap[h] or hitLimit[h]
    if v ~= HV[k] or t > L or t > MAX or n == 0 then
      return nil
    end
    local at0, N = HA[k], keySubs[k]
    if at ~= at0 then
      local W, cur0 = HW[k], HC[k]
      if cur0 >= 256 ^ W then
        return nil -- wider slots: subConsume's rare path
      end
      local d = at - at0
      salt = (salt + 1) % 256
      local f = subShift(W, N, d)
      if d == 1 then
        v = spack(f, cur0, v, at, t, n, W, salt)
      elseif d < N then
        v = spack(f, SUBZERO, cur0, v, at, t, n, W, salt)
      else
        v = spack(f, SUBZERO, cur0, at, t, n, W, salt)
      end
      s3[k], HV[k], HA[k], HT[k], HC[k] = v, v, at, t, n
    elseif HC[k] + (total - HT[k]) == 0 then
      return nil
    end
    s2[k], dirty[k] = t, true
    local s = keyWindow[k] / N
    local e = now - at * s
    if e < 0 then
      e = 0
    end
    return L - t, (N + 1) * s - e
  end

  -- store: the TTL is when the newest sub-window holding hits leaves the
  -- estimate (limiter's subExpires). A string consume kept (subHead) changed
  -- at most its total and cur, in place, its TTL unchanged: one SETRANGE of
  -- those 16 bytes, no string of the whole counter made. A string subHit
  -- built is written whole, its newest sub-window its own.
  function subStore(k, key)
    local at, total, v, N = s1[k], s2[k], s3[k], keySubs[k]
    if v == o3[k] then
      if total ~= o2[k] and at == o1[k] then
        local n = #v
        local off = SUBFMT[-n] -- SETRANGE's offset of the head's total
        if not off then
          off = fmt('%d', n - 18)
          SUBFMT[-n] = off
        end
        -- v is k's stored string (HV[k]), at its sub-window (HA[k]).
        redis.call('SETRANGE', key, off, spack('<dd', total, HC[k] + (total - HT[k])))
      end
      return
    elseif total == 0 then
      if ox[k] then
        redis.call('DEL', key)
      end
      return
    end
    local newest
    if v == HV[k] and at == HA[k] then
      local W, t0 = HW[k], HT[k]
      local cur = HC[k] + (total - t0)
      if t0 ~= total then
        salt = (salt + 1) % 256
        v = spack(subSame(W, N), v, at, total, cur, W, salt)
      end
      newest = cur ~= 0 and at or nil
    else
      local at0, cur, W, t0 = subHead(v, at, total)
      if at0 == at and t0 ~= total then
        -- Built by one entry of the call, then changed in place by another.
        salt = (salt + 1) % 256
        v = spack(subSame(W, N), v, at, total, cur, W, salt)
      end
    end
    newest = newest or subNewest(v, N, at, total)
    redis.call('SET', key, v, 'PX', fmt('%d', (newest + N + 1) * (keyWindow[k] / N) - now))
  end

end

-- roll moves the state to sub-window j: the total loses the slots that
-- left the estimate (older than j - N); the string stays as it is. The
-- last j is kept with what it was computed from, as a call's counters
-- mostly share their window and sub-windows.
local rnow, rw, rN, rj = -1, 0, 0, 0
local function subRoll(k)
  local at, total, v, w, N = o1[k], o2[k], o3[k], keyWindow[k], keySubs[k]
  if now ~= rnow or w ~= rw or N ~= rN then
    rnow, rw, rN, rj = now, w, N, idiv(now, w / N)
  end
  local j = rj
  if at == j or (at > j and total ~= 0) then
    s1[k], s2[k], s3[k] = at, total, v
    return
  elseif total == 0 or at > j or j - at > N then
    s1[k], s2[k], s3[k] = j, 0, ''
    return
  end
  local W = byte(v, #v - 1)
  local r = SUBR[W]
  for i = N - (j - at) + 1, N do
    total = total - sunpack(r, v, (i - 1) * W + 1)
  end
  s1[k], s2[k], s3[k] = j, total, total == 0 and '' or v
end

-- decide admits n iff total + n <= L; otherwise the retry is the time until
-- enough of the oldest sub-windows have left the estimate.
local function subDecide(k, h, n)
  local at, total, v, w, N, L = s1[k], s2[k], s3[k], keyWindow[k], keySubs[k], hitCap[h] or hitLimit[h]
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
  local at0, cur, W = subHead(v, at, total)
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
function subNewest(v, N, at, total)
  local at0, cur, W = subHead(v, at, total)
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
local function subCounts(at, total, v, N)
  local cs = { 0 }
  if v == '' then
    return cs
  end
  local at0, cur, W = subHead(v, at, total)
  local d, r = at - at0, SUBR[W]
  cs[d + 1] = cur
  for i = 1, N - d do
    cs[d + i + 1] = sunpack(r, v, (i - 1) * W + 1)
  end
  return cs
end

-- subRefundOlder takes back, on the rare path, the refund of dec that the
-- current sub-window (at, now holding c) could not: from each older
-- sub-window still in the estimate, the newest first, never below 0. It
-- returns the state as consume does, appending an undo token per
-- sub-window it changed to XU (the sub-window and what it gained).
local function subRefundOlder(k, at, v, N, rest, c, cur, dec)
  local cs = subCounts(at, rest + cur, v, N)
  cs[1] = c
  for i = 2, N + 1 do
    local back = min(dec, cs[i] or 0)
    if back > 0 then
      cs[i], dec, rest = cs[i] - back, dec - back, rest - back
      nXU = nXU + 2
      XU[nXU - 1], XU[nXU] = at - (i - 1), -back
    end
  end
  local t = rest + c
  s2[k], s3[k] = t, t == 0 and '' or subEncode(at, t, cs, N)
  return at, c - cur
end

-- consume: the current sub-window (at) grows by inc, the total saturating at
-- MAX, then dec comes back where the hits still count, the newest first:
-- from the current sub-window, then from each older one in the estimate
-- (subRefundOlder), never below 0. The undo token is the sub-window and what
-- it gained. A stale string is rewritten at at even when nothing changed
-- (what consume returns is written, as the Go twin stores it).
local function subConsume(k, inc, dec)
  local at, total, v, N = s1[k], s2[k], s3[k], keySubs[k]
  local at0, cur0, W, cur = at, 0, 1, 0
  if v ~= '' then
    at0, cur0, W = subHead(v, at, total)
    if at0 == at then
      cur = cur0
    end
  end
  local rest = total - cur
  local c = min(cur + inc, MAX - rest)
  if dec > c and rest > 0 then
    return subRefundOlder(k, at, v, N, rest, 0, cur, dec - c)
  elseif dec >= c then
    c = 0
  else
    c = c - dec
  end
  local t = rest + c
  if at0 == at and (c == cur or (c > 0 and cur > 0)) then
    -- Only the total and cur change, and not the newest sub-window
    -- holding hits, so neither does the expiry: store writes the two in
    -- place (subHead).
    s2[k] = t
    return at, c - cur
  elseif t == 0 then
    s2[k], s3[k] = 0, ''
    return at, c - cur
  end
  salt = (salt + 1) % 256
  local d = at - at0
  if v == '' then
    v = spack(subSame(1, N), SUBZERO, at, t, c, 1, salt)
  elseif d == 0 then
    v = spack(subSame(W, N), v, at, t, c, W, salt)
  elseif subWidth(cur0) > W then
    local cs = subCounts(at, total, v, N)
    cs[1] = c
    v = subEncode(at, t, cs, N)
  elseif d == 1 then
    v = spack(subShift(W, N, d), cur0, v, at, t, c, W, salt)
  elseif d < N then
    v = spack(subShift(W, N, d), SUBZERO, cur0, v, at, t, c, W, salt)
  else
    v = spack(subShift(W, N, d), SUBZERO, cur0, at, t, c, W, salt)
  end
  s2[k], s3[k] = t, v
  return at, c - cur
end

-- report: remaining is L - total, at least 0; the reset is the time until
-- the newest sub-window holding hits leaves the estimate.
local function subReport(k, h, allowed)
  local at, total, N = s1[k], s2[k], keySubs[k]
  local reset = 0
  if total ~= 0 then
    local s = keyWindow[k] / N
    local e = now - at * s
    if e < 0 then
      e = 0
    end
    reset = ((N - (at - subNewest(s3[k], N, at, total))) + 1) * s - e
  end
  if not allowed then
    return 0, reset
  end
  local r = (hitCap[h] or hitLimit[h]) - total
  if r <= 0 then
    return 0, reset
  end
  return r, reset
end

-- undo subtracts delta from sub-window idx while the estimate counts it,
-- and puts back what a refund took from a sub-window it emptied. Rare: it
-- decodes and encodes every slot.
local function subUndo(k, idx, delta)
  local at, total, N = s1[k], s2[k], keySubs[k]
  if delta == 0 or idx > at or idx < at - N then
    return 0
  end
  local cs = subCounts(at, total, s3[k], N)
  local x = at - idx + 1
  local old = cs[x] or 0
  if old == 0 and delta > 0 then
    return 0
  end
  local c = min(max(old - delta, 0), MAX - (total - old))
  cs[x] = c
  total = total - old + c
  s2[k], s3[k] = total, total == 0 and '' or subEncode(at, total, cs, N)
  return 1
end

register('sliding_window', { load = subLoad, parse = subParse, roll = subRoll, decide = subDecide,
  consume = subConsume, report = subReport, store = subStore, undo = subUndo, hit = subHit, fits = true,
  bind = function()
    SUBZERO = string.rep('\0', 8 * 64)
  end }, true)
