-- The call's path is three files, joined after the algorithms in this
-- order: call.lua (what a call does before its entries: the flags' tests,
-- binding, the clock, the keys' specs, the shared read), general.lua (the
-- general path of an entry, and the undo) and run.lua (the fast paths and
-- run itself).

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
