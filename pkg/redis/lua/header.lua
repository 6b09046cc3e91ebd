-- Sluice's limiter: every algorithm of pkg/limiter, the Lua twin of
-- limiter.Evaluate, joined at build time (script.go) from these files, in
-- this order: the protocol (made by protocol.go from its layout table, so
-- both sides read one definition), this header, every other file of lua/,
-- one per algorithm named like its Go twin (in name order: any order works,
-- as each registers and binds itself), and the call's path, lua/run/ in name
-- order (call.lua, general.lua, run.lua), which decides a call. A
-- file's locals are seen by the files after it.
--
-- One call decides a batch: several independent requests (entries) that
-- concurrent decisions of one Sluice instance share, each all or nothing on
-- its own, one after another, as if each were its own call at the same
-- instant. Each hit is decided by its own algorithm's file, which does the
-- same float64 operations in the same order as its Go file (every Lua
-- number is a double), so both twins give the same answers bit for bit; a
-- differential test checks it, one request per call and several.
--
-- KEYS are every key of the batch once (counters, and the markers of undo
-- entries), ARGV[1] now in Unix ms or "" for Redis TIME, ARGV[2] each key's
-- spec, ARGV[3] the entries; the reply is one string, the clock then each
-- entry's reply. protocol.go defines every layout (the F_ formats).
--
-- Atomic: Redis runs a script to completion with no other command in
-- between, so every entry reads, decides and writes its counters as one
-- indivisible step, whichever service instance sends it. Every key the
-- script touches is in KEYS, and all KEYS share one Cluster slot (the caller
-- batches per slot).
--
-- Loaded as a library (FUNCTION LOAD, Redis 7+) and called by FCALL, its
-- functions are created once, at load; run by EVALSHA (older Redis, or when
-- FUNCTION is refused), the whole text runs on every call. Either way a
-- call pays for what it runs, so the hot path avoids calls into C (each
-- costs about as much as twenty Lua instructions): the arguments and the
-- reply are binary strings read and written by struct in the layouts of
-- protocol.go, flags are read with %, and the counters of a batch are each
-- read once and written once.
--
-- Clock: one now for the whole batch, Redis TIME unless ARGV[1] gives one
-- (tests only). A counter's state is read on the batch's first use of it,
-- rolled to now once, changed in memory by each entry in turn, and written
-- at the end if it changed, with the TTL of its expiry (at most two windows
-- away for the windows and logs, when the bucket is full again for a token
-- bucket); a state that becomes empty is deleted, so no key exists without a
-- TTL. A change that leaves the expiry where it was (a hit in the stored
-- fixed window, or in the stored sub-window of a window of sub-windows that
-- already holds hits) is written in place with SETRANGE and keeps the TTL
-- set before: on Redis's clock the same instant. What a denied entry sees is never written (overdraw and count-denied
-- hits aside).
--
-- An algorithm's file implements, on key k's state in the per-key tables
-- below and hit h's in the per-hit tables (each function reads what it
-- needs by index, so a call passes the indices, not the state; the tables
-- are the header's, made once, so no call makes a table or a closure):
--   load(k, key): read key into o1[k], o2[k], o3[k] (0, 0, 0 for none)
--     and ox[k] (whether the key existed);
--   parse(k, value): as load, from the value of GET (only for a state
--     that is one string: run reads them all with one MGET);
--   roll(k): s1[k], s2[k], s3[k] from o1[k].. at now (the Go twin's roll);
--   decide(k, h, n) -> ok, retry_ms: whether n more hits of hit h fit;
--   consume(k, inc, dec, ta, tr) -> u1, u2: the Go twin's consume of s1[k]..
--     with the limit of the key's first hit (first[k]), ta and tr the slot
--     tokens of the acquire and the release for concurrency (nil in the
--     fast paths and the overdraw and lease consumes, which no slot token
--     takes), and the undo token; a refund that changed older
--     (sub-)windows too appends an undo token (u1, u2) of each to XU (nXU
--     its length), which an undo takes back one by one;
--   report(k, h, allowed) -> remaining (0 unless allowed), reset_after_ms
--     (the Go twin's report) of hit h;
--   store(k, key): write s1[k].. over o1[k].., only what changed, with its
--     TTL, or delete an empty state;
--   undo(k, u1, u2) -> changed (0 or 1): take undo token (u1, u2) back
--     from s1[k]..
-- and, optionally, for the plain path (one admitted hit of no flag but a
-- pool's class):
--   fits = true: decide admits when s2[k] + n <= (hitCap[h] or
--     hitLimit[h]), its first test, which run then makes inline;
--   hit(k, h, n) -> remaining, reset_after_ms: an admitted hit's decide,
--     consume and report in one function, or nothing, having changed
--     nothing, when the hit needs the general path (a denial among them);
--   bind(): what the file binds on run's first call (a library being
--     loaded may not touch struct, nor make what each call would remake);
-- and registers them with register, under its config spelling; the
-- protocol's ALGORITHMS (from limiter's registry) gives its number and
-- traits.
--
-- A counter's key may hold what no file wrote: another type, or a string
-- of another layout (a stray value under Sluice's prefix, or a build of
-- another layout). load and parse read it as no counter and store writes
-- over it (or load deletes it), rather than fail the call, which decides
-- other requests too.

local TOMB = 1000

-- The library functions the hot path calls, bound by run on its first call
-- (a library being loaded may not touch struct).
local spack, sunpack, floor, min, max, fmt, sub, byte

-- now is the batch's clock, set by run.
local now = 0

-- The tables run and the algorithms work in, made once when the library
-- loads and reused by every call (tables made per call cost, with their
-- collection, more than the decisions of a small batch; EVALSHA runs the
-- whole text per call and so makes them per call). Only indices a call sets
-- first are read, and run resets those it reads before setting (keyAlg, ox,
-- dirty, mark) for its keys.
--
-- Per key k (KEYS[k]): keyAlg its algorithm's functions (its variant: the
-- sub-windows', the calendar's), keyWindow the window in ms, keySubs the
-- sub-windows N (a calendar's period starts instead; for the logs 1 for
-- concurrency, whose members are slots named by slot tokens, 0 for the
-- sliding log); o1-o3 the state as stored and ox 0 until loaded, then
-- whether the key existed; s1-s3 the state at now as the call changes it;
-- dirty, true when store must write it. What s1, s2, s3 (and o1-o3) hold:
--   sliding_window, N = 1: the window index, cur (its hits), prev (the
--     previous window's hits);
--   sliding_window, N > 1: the sub-window index at, the total of the
--     estimate, the stored string of slots and head (sliding_sub.lua);
--   fixed_window: the window index, the count, 0; on a calendar, the
--     period's start in Unix ms, the count, 0;
--   token_bucket: t, f, d, the theoretical arrival time t + f/d ms;
--   sliding_log, concurrency: the key, the count in the window, the
--     members the last consume changed (so that a change shows when the
--     count does not).
-- Per key of an entry (see run): mark, the entry that last marked it; inc,
-- dec, odi its growth, refund and overdraw; ask the lease asked; first its
-- first hit (whose limit and burst consume uses); tka, tkr the slot tokens
-- of its acquires and releases.
local keyAlg, keyWindow, keySubs, o1, o2, o3, ox, s1, s2, s3, dirty = {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}
local mark, inc, dec, odi, ask, first, tka, tkr = {}, {}, {}, {}, {}, {}, {}, {}
-- Per hit h of an entry: hitKey its key's index, hitLimit the requests L,
-- hitBurst the burst, hitN the hits, hitFlags the FL_ flags, hitLease the
-- lease permits asked, hitCap a pool's class's capacity under its ceiling
-- (FL_CEILING: limiter.Limit.Capacity, computed by Go, the limit or a token
-- bucket's burst it admits up to; nil for any other hit, which decide and
-- report then read as hitLimit); ok and retry its decision, rd and td,
-- ra and ta its "if denied" and "if admitted" remaining and reset.
local hitKey, hitLimit, hitBurst, hitN, hitFlags, hitLease, ok, retry, rd, td, ra, ta = {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}
local hitCap = {}
-- Per key x of an entry: ek its key's index, tu1, tu2 its undo token, tg
-- its lease granted; out the reply's parts; pidx, pnames prefetch's keys.
local ek, tu1, tu2, tg, out = {}, {}, {}, {}, {}
-- The undo tokens more of an entry's consumes, pairs (XU, nXU its length),
-- and per key of the entry where its own start (xo) and how many (xn).
local XU, nXU, xo, xn = {}, 0, {}, {}
local pidx, pnames = {}, {}

-- ALG is the algorithms by limiter.Algorithm number, as the files register
-- them.
local ALG = {}

-- FIELDS is what an algorithm's table may hold (a library being loaded
-- may not call pairs, so register copies these by name).
local FIELDS = { 'load', 'parse', 'roll', 'decide', 'consume', 'report', 'store', 'undo', 'inflight', 'like', 'hit', 'fits', 'bind' }

-- register makes A the algorithm of the config spelling name, with the
-- traits limiter's registry gives it (lease). With variant, A is the
-- variant of N > 1 sub-windows of that algorithm (true), or the one named
-- by variant ('cal'). A may name, as like,
-- another algorithm whose functions it takes for those it lacks (resolved
-- on the first call, so that the files may come in any order).
local function register(name, A, variant)
  local t = ALGORITHMS[name]
  if not t then
    error('sluice: ' .. name .. ' is not in limiter\'s registry')
  end
  A.lease = t.lease
  local R = ALG[t.number] or {}
  ALG[t.number] = R
  if variant then
    R[variant == true and 'sub' or variant] = A -- 'cal': on a calendar
    return
  end
  for i = 1, #FIELDS do
    R[FIELDS[i]] = A[FIELDS[i]]
  end
  R.lease = t.lease
end

-- resolve gives each algorithm registered like another the other's
-- functions that it lacks.
local function resolve()
  for n = 0, NALGORITHMS - 1 do
    local A = ALG[n]
    if A and A.like then
      local L = ALG[ALGORITHMS[A.like].number]
      for i = 1, #FIELDS do
        local f = FIELDS[i]
        if A[f] == nil then
          A[f] = L[f]
        end
      end
      A.like = nil
    end
  end
end

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
