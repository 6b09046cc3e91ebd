-- Sluice shared limits: one holder's claim on one shared limit (the Redis
-- twin of limiter.Divide, computing in the same float64 operation order).
--
-- KEYS[1]  the limit's hash, <prefix>{rlqs:<window_ms>:k:<escaped key>}; one
--          field per holder, valued "<share>:<demand>:<expires_ms>"
-- ARGV[1]  holder (the field)
-- ARGV[2]  limit: hits per window shared by all holders
-- ARGV[3]  demand: the holder's, in thousandths of a hit per window
-- ARGV[4]  hold: ms the holder's share stays reserved without another claim
-- ARGV[5]  now in Unix ms, or "" to read Redis TIME (tests only pass it)
-- ARGV[6]  keep: the share the holder still needs reserved (its share is
--          never lowered below the smaller of keep and its current share)
--
-- Reply: {share, holders, total demand}.
--
-- Atomic because a script runs alone: reading every holding, dropping the
-- expired ones, dividing and writing the claimant's share happen with no
-- other claim in between, so the shares of a limit never add up to more than
-- it, whichever Sluice instance claims. The key's TTL is set in the same
-- script to the latest expiry among its holdings, so it outlives none.

local key = KEYS[1]
local holder = ARGV[1]
local limit = tonumber(ARGV[2])
local demand = tonumber(ARGV[3])
local hold = tonumber(ARGV[4])
local now = tonumber(ARGV[5])
local keep = tonumber(ARGV[6]) or 0
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local all = redis.call('HGETALL', key)
local n, total, others, cur = 1, demand, 0, 0
local expires = now + hold
local last = expires
local dead, live = {}, {}
for i = 1, #all, 2 do
  local s, d, e = string.match(all[i + 1], '^(%d+):(%d+):(%d+)$')
  s, d, e = tonumber(s), tonumber(d), tonumber(e)
  if not e or e <= now then
    dead[#dead + 1] = all[i]
  elseif all[i] == holder then
    cur = s
  else
    n = n + 1
    total = total + d
    others = others + s
    live[#live + 1] = {s, d}
    if e > last then last = e end
  end
end
-- HDEL in chunks: unpack is bounded by Lua's stack.
for i = 1, #dead, 1000 do
  redis.call('HDEL', key, unpack(dead, i, math.min(i + 999, #dead)))
end

local function target_of(d)
  local t
  if total <= limit * 1000 then
    t = math.floor((d + (limit * 1000 - total) / (n + 1)) / 1000)
  else
    t = math.floor(limit * d / total)
  end
  if t >= limit then t = limit end
  return t
end

-- need: what the others hold once each has at least its target.
local need = 0
for _, h in ipairs(live) do
  need = need + math.max(h[1], target_of(h[2]))
end
local target = target_of(demand)
local free = 0
if others < limit then free = limit - others end
local nxt = target
if math.abs(target - cur) * 10 <= cur and (cur < target or cur + need <= limit) and (keep == 0 or cur >= target) then nxt = cur end
if nxt < math.min(keep, cur) then nxt = math.min(keep, cur) end
if nxt > free then nxt = free end

redis.call('HSET', key, holder, string.format('%.0f:%.0f:%.0f', nxt, demand, expires))
redis.call('PEXPIRE', key, last - now)
return {nxt, n, string.format('%.0f', total)}
