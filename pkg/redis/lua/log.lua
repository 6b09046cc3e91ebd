-- sliding_log (limiter.SlidingLog; log.go), whose functions concurrency.lua
-- takes: a sorted set per counter, one
-- member per counted hit, scored by its time; members are "<time>:<index>",
-- the index (4 digits, so that members of one time sort by it) one more than
-- the largest of that time, and for concurrency (N = 1) ":<token>" after
-- it, the slot token of the acquire that took the slot. The state is s1 =
-- the key, s2 = the count in (now - w, now], s3 = the members changed by
-- the last consume (so that a change shows even when the count does not);
-- consume and undo change the set in place, store writes nothing.
--
-- A refund's removed members stay TOMB ms as tombstones, "~" and the member
-- scored -now (below every live time, so no read sees them), so that an
-- undo can put them back at their own times: the undo token is now and
-- added * 4096 + removed (each at most MAXLOG).
-- The file is one block, so that its locals leave scope at its end: a
-- script run by EVAL is one main function, which Lua allows 200 locals.
do
  -- The newest live time of one log as its last consume left it (topT, of
  -- key topKey at clock topNow), so that report and the TTL need not read it
  -- again; load and every other change of a log clear it.
  local topKey, topNow, topT

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

  -- logNewest is the time of the newest live member of key (count > 0),
  -- from its name ("<time>:", as Sluice writes it: a score read back costs
  -- Redis a printf of 17 digits) or, for a member of another name, its score.
  local function logNewest(key)
    local v = redis.call('ZREVRANGEBYSCORE', key, '+inf', '(0', 'LIMIT', '0', '1')
    local t = v[1] and tonumber(string.match(v[1], '^(%d+):%d'))
    if t or not v[1] then
      return t or now
    end
    v = redis.call('ZREVRANGEBYSCORE', key, '+inf', '(0', 'WITHSCORES', 'LIMIT', '0', '1')
    return logTime(v[2])
  end

  local function logCount(key, w)
    return redis.call('ZCOUNT', key, fmt('(%d', now - w), '+inf')
  end

  -- logLoad counts the members in (now - w, +inf]: for the sliding log as
  -- all less those at or before now - w, as a ZCOUNT of the window walks all
  -- of a small sorted set (a listpack) and one of the expired walks only
  -- those; for concurrency, whose slots in flight are few, with one ZCOUNT.
  local function logLoad(k, key)
    local w, N = keyWindow[k], keySubs[k]
    topKey = nil
    local n
    if N == 1 then
      n = redis.pcall('ZCOUNT', key, fmt('(%d', now - w), '+inf')
    else
      n = redis.pcall('ZCARD', key)
    end
    if type(n) == 'table' then
      redis.call('DEL', key) -- not a sorted set
      n = 0
    elseif n > 0 and N ~= 1 then
      n = n - redis.call('ZCOUNT', key, '-inf', fmt('%d', now - w))
    end
    o1[k], o2[k], o3[k], ox[k] = key, n, 0, true
  end

  local function logRoll(k)
    s1[k], s2[k], s3[k] = o1[k], o2[k], 0
  end

  local function logDecide(k, h, n)
    local key, count, w, L = s1[k], s2[k], keyWindow[k], hitCap[h] or hitLimit[h]
    if count + n <= L then
      return true, 0
    end
    local v = redis.call('ZRANGEBYSCORE', key, fmt('(%d', now - w), '+inf', 'WITHSCORES', 'LIMIT', fmt('%d', count + n - L - 1), '1')
    return false, logTime(v[2]) + w - now
  end

  -- logAdd adds n members at time t, each ending in tail.
  local function logAdd(key, t, n, tail)
    local top = redis.call('ZREVRANGEBYSCORE', key, fmt('%d', t), fmt('%d', t), 'LIMIT', '0', '1')
    local base = 0
    if top[1] then
      base = tonumber(string.match(top[1], '^%-?%d+:(%d+)')) + 1
    end
    local args = { 'ZADD', key }
    for x = 0, n - 1 do
      args[#args + 1] = fmt('%d', t)
      args[#args + 1] = fmt('%d:%04d', t, base + x) .. tail
    end
    redis.call(unpack(args))
  end

  -- logDropped returns the members in (cut, +inf] that a refund of n removes:
  -- the newest of the sliding log (N = 0); for concurrency (N = 1) the oldest
  -- n named by slot token tr, none for tr = 0 (a release without a valid
  -- token frees nothing).
  local function logDropped(key, cut, n, N, tr)
    if n == 0 then
      return {}
    elseif N == 0 then
      return redis.call('ZREVRANGEBYSCORE', key, '+inf', fmt('(%d', cut), 'LIMIT', '0', fmt('%d', n))
    elseif tr == 0 then
      return {}
    end
    local all, v, tail = redis.call('ZRANGEBYSCORE', key, fmt('(%d', cut), '+inf'), {}, fmt(':%d', tr)
    for x = 1, #all do
      if sub(all[x], -#tail) == tail then
        v[#v + 1] = all[x]
        if #v == n then
          break
        end
      end
    end
    return v
  end

  -- logTrim removes the members at or before cut and the tombstones older
  -- than TOMB (scored -TOMB - now.. -1) with one command when the two ranges
  -- meet (cut >= 0: every clock but a test's first window), and returns how
  -- many members of the window left it (gone > 0), for logConsume's TTL.
  local function logTrim(key, cut, exact)
    if cut >= 0 and not exact then
      return redis.call('ZREMRANGEBYSCORE', key, fmt('%d', min(TOMB - now, 0)), fmt('%d', cut))
    end
    local gone = redis.call('ZREMRANGEBYSCORE', key, '0', fmt('%d', cut))
    redis.call('ZREMRANGEBYSCORE', key, fmt('%d', -(now - TOMB)), '-1')
    return gone
  end

  -- logTop reads the highest member of key: the log's newest time (now if
  -- none is later) and the index of the next member at now, nil when a
  -- member is after now (logAdd reads it). The time and index come from the
  -- member's name when Sluice wrote it, else from its score.
  local function logTop(key)
    local top = redis.call('ZRANGE', key, '-1', '-1')
    if not top[1] then
      return now, 0
    end
    local tt, ix = string.match(top[1], '^(%d+):(%d+)')
    local ts = tonumber(tt)
    if not ts then -- a tombstone or a stray: read the score
      top = redis.call('ZRANGE', key, '-1', '-1', 'WITHSCORES')
      ts = tonumber(top[2])
      if ts and ts <= 0 then
        return now, 0
      elseif ts == now then
        ix = string.match(top[1], '^%-?%d+:(%d+)')
      end
    end
    if not ts or ts > now then
      return max(logTime(ts), now), nil
    elseif ts == now then
      return now, tonumber(ix) + 1
    end
    return now, 0
  end

  -- logPlain is consume's common case: inc > 0 entries at now, the log not
  -- full, nothing to remove. It reads the highest member once: its time is
  -- the log's newest (so the TTL and report need no other read), and when it
  -- is now, its index the base of the new ones.
  local function logPlain(key, count, w, inc, N, ta)
    logTrim(key, now - w)
    local newest, base = logTop(key)
    local add = min(inc, MAXLOG - count)
    local tail = N == 1 and fmt(':%d', ta or 0) or ''
    if base and add == 1 then
      redis.call('ZADD', key, fmt('%d', now), fmt('%d:%04d', now, base) .. tail)
    else
      logAdd(key, now, add, tail)
    end
    redis.call('PEXPIRE', key, fmt('%d', newest + w - now))
    topKey, topNow, topT = key, now, newest
    return key, count + add, add, now, add * 4096
  end

  -- consume adds inc entries at now (the log holding at most MAXLOG; for
  -- concurrency slots of token ta), then removes dec (logDropped).
  local function logConsume(k, inc, dec, ta, tr)
    local key, count, w, N = s1[k], s2[k], keyWindow[k], keySubs[k]
    if dec == 0 and inc > 0 and count < MAXLOG then
      local u1, u2
      s1[k], s2[k], s3[k], u1, u2 = logPlain(key, count, w, inc, N, ta)
      return u1, u2
    end
    topKey = nil
    local cut = now - w
    local add = min(inc, max(MAXLOG - count, 0))
    local v, gone
    if add == 0 then -- a release: what it drops first, as then gone is moot
      v = logDropped(key, cut, min(dec, count), N, tr or 0)
      gone = logTrim(key, cut, #v == 0)
    else
      gone = logTrim(key, cut, true)
      logAdd(key, now, add, N == 1 and fmt(':%d', ta or 0) or '')
      v = logDropped(key, cut, min(dec, count + add), N, tr or 0)
    end
    local drop = #v
    if drop > 0 then
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
      topKey, topNow, topT = key, now, logNewest(key)
      ttl = topT + w - now
      if drop > 0 then
        ttl = max(ttl, TOMB)
      end
    end
    if (c > 0 or drop > 0) and (gone > 0 or add > 0 or drop > 0) then
      redis.call('PEXPIRE', key, fmt('%d', ttl))
    end
    s2[k], s3[k] = c, add + drop
    return now, add * 4096 + drop
  end

  local function logReport(k, h, allowed)
    local key, count, w, L = s1[k], s2[k], keyWindow[k], hitCap[h] or hitLimit[h]
    if count == 0 then
      if allowed then
        return L, 0
      end
      return 0, 0
    end
    local newest = topT
    if key ~= topKey or now ~= topNow then
      newest = logNewest(key)
    end
    local reset = newest + w - now
    if not allowed or count >= L then
      return 0, reset
    end
    return L - count, reset
  end

  -- hit is a plain admitted hit's decide, consume and report (logDecide's
  -- first test, logPlain, logReport with the newest it read) in one
  -- function, or nothing for the general path (a denial, a full log, no
  -- hits).
  local function logHit(k, h, n)
    local count, L = s2[k], hitCap[h] or hitLimit[h]
    if count + n > L or count >= MAXLOG or n == 0 then
      return
    end
    local w = keyWindow[k]
    local c
    s1[k], c, s3[k] = logPlain(s1[k], count, w, n, keySubs[k])
    s2[k], dirty[k] = c, true
    if c >= L then
      return 0, topT + w - now
    end
    return L - c, topT + w - now
  end

  local function logStore()
  end

  -- undo puts back the members a consume at time t removed, then removes the
  -- ones it added (the newest of time t).
  local function logUndo(k, t, token)
    if token == 0 then
      return 0
    end
    local key, w = s1[k], keyWindow[k]
    topKey = nil
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
      local v = redis.call('ZREVRANGEBYSCORE', key, fmt('%d', t), fmt('%d', t), 'LIMIT', '0', fmt('%d', add))
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
    s2[k], s3[k] = c, 0
    return 1
  end

  register('sliding_log', { fits = true, hit = logHit, load = logLoad, roll = logRoll, decide = logDecide, consume = logConsume,
    report = logReport, store = logStore, undo = logUndo })
end
