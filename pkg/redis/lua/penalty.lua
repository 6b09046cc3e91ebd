-- penalty.lua: a limiter.Penalty on a counter (pkg/limiter/penalty.go is
-- the Go twin, and evaluate.go's blocked and penalize say when). A key
-- whose F_SPEC algorithm byte has 64 has fmtPenalty after its spec: block,
-- escalate, max and forget (ms). Its state, the Unix ms its last block
-- ends and that block's level, is the string "until level" at the key plus
-- ":p" (same slot), which expires forget after the block ends. Entries
-- with a penalty come with the full reply, so only the general path sees
-- them. The functions live in ALG.pen, out of the main chunk's locals.
do
  local P = {}
  ALG.pen = P
  -- Per key of the call: the penalty (pb nil: none), and its state once
  -- read (pu nil: not read).
  local pb, pe, pm, pf, pu, pl = {}, {}, {}, {}, {}, {}
  -- Per hit of the entry: whether a block denied it (the reply's bit 4).
  local bl = {}

  -- The keys of the last call that had a penalty (their number, nset),
  -- which reset clears.
  local set, nset = {}, 0

  -- spec reads key k's fmtPenalty at p, and returns where the next spec
  -- starts. run calls it only for a key that has one, after reset: a key
  -- with none costs the hot path nothing.
  function P.spec(specs, p, k)
    pu[k], pl[k] = nil, nil
    nset = nset + 1
    set[nset] = k
    pb[k], pe[k], pm[k], pf[k], p = struct.unpack('<dddd', specs, p)
    return p
  end

  -- reset clears what the last call read of its keys with a penalty, once
  -- per call, before spec.
  function P.reset()
    for i = 1, nset do
      local k = set[i]
      pb[k], pu[k], pl[k] = nil, nil, nil
    end
    nset = 0
  end

  -- load reads key k's state, once per call.
  function P.load(KEYS, k)
    if pb[k] == nil or pu[k] ~= nil then
      return
    end
    local v = redis.call('GET', KEYS[k] .. ':p')
    local u, l = 0, 0
    if v then
      local a, b = string.match(v, '^(%d+) (%d+)$')
      u, l = tonumber(a) or 0, tonumber(b) or 0
    end
    pu[k], pl[k] = u, l
  end

  -- gate denies hit h on key k with flags f until the block ends, when
  -- the key is blocked and h is no refund; a blocked key consumes nothing.
  -- decideHits calls it for every hit of the entry.
  function P.gate(h, k, f)
    bl[h] = false
    if pb[k] and f % (2 * FL_REFUND) < FL_REFUND and now < pu[k] then
      ok[h], retry[h], odi[k], bl[h] = false, pu[k] - now, 0, true
    end
  end

  -- bit is hit h's reply bit: 4 when a block denied it.
  function P.bit(h)
    return bl[h] and 4 or 0
  end

  -- blockMs is the block of an offence at level (limiter.Penalty.blockMs).
  local function blockMs(k, level)
    local b, m, e = pb[k], pm[k], pe[k]
    for _ = 1, level do
      if e == 1 then
        break
      end
      if b > math.floor(m / e) then
        return m
      end
      b = b * e
    end
    return math.min(b, m)
  end

  -- offend starts a block on each key of the count hits whose hit its
  -- limit denied while the key was not blocked, once per key, writes it,
  -- and makes the denied hits' retry reach its end.
  function P.offend(KEYS, count)
    local started = {}
    for h = 1, count do
      local k, f = hitKey[h], hitFlags[h]
      if pb[k] and not ok[h] and f % (2 * FL_REFUND) < FL_REFUND and now >= pu[k] and not started[k] then
        started[k] = true
        local level = 0
        if pu[k] ~= 0 and now < pu[k] + pf[k] then
          level = math.min(pl[k] + 1, 63)
        end
        pu[k], pl[k] = now + blockMs(k, level), level
        redis.call('SET', KEYS[k] .. ':p', string.format('%d %d', pu[k], level), 'PX', string.format('%d', pu[k] + pf[k] - now))
      end
    end
    for h = 1, count do
      local k = hitKey[h]
      if started[k] and not ok[h] and hitFlags[h] % (2 * FL_REFUND) < FL_REFUND then
        retry[h], bl[h] = math.max(retry[h], pu[k] - now), true
      end
    end
  end

  -- report makes the resets of the count hits denied on a penalized key
  -- reach the end of its block.
  function P.report(count)
    for h = 1, count do
      local k = hitKey[h]
      if pb[k] and not ok[h] then
        ta[h], td[h] = math.max(ta[h] or 0, pu[k] - now), math.max(td[h] or 0, pu[k] - now)
      end
    end
  end
end
