-- concurrency (limiter.Concurrency; log.go): requests in flight, the sliding
-- log's functions on the same sorted set, except that a refund (the release
-- when a stream ends) removes the oldest members, not the newest, so the
-- slots left are those acquired last and a slot never released frees itself
-- one window after its acquire (run passes N = 1 for it: oldest).
register('concurrency', { like = 'sliding_log', oldest = true })
