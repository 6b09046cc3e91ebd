-- concurrency (limiter.Concurrency; log.go): requests in flight, the
-- sliding log's functions on the same sorted set (run passes N = 1 for it,
-- inflight), except that each member is a slot named by the slot token of
-- the acquire that took it, and a refund (the release when a stream ends)
-- removes the oldest slots of its own token only, none without one: a
-- release sent for a request that took no slot (Envoy sends one for a
-- denied request too) frees nothing. A slot never released frees itself
-- one window after its acquire.
register('concurrency', { like = 'sliding_log', inflight = true })
