// Package limiter is Sluice's proto-free core of the rate-limit decision: the
// types of a request (Limit, Hit, Result), the Store interface that decides a
// request against its counters, the algorithms written in Go (Evaluate, the
// sliding window counter of DESIGN.md section 3), and MemoryStore, the
// in-memory Store used when no Redis is configured.
//
// One Envoy ShouldRateLimit request becomes one Store.Apply call. Apply is
// all or nothing: a request is admitted only if every enforced (non-shadow)
// hit is, and only an admitted request consumes; shadow hits are counted but
// never deny; hits on the same counter share one increment. Time is in Unix
// milliseconds throughout; windows are aligned to the Unix epoch.
//
// Evaluate is the Go twin of the Redis Lua script in pkg/redis: written in
// float64 in the script's operation order, so that a differential test can
// require both to give the same Results on every sequence. Any Store must
// pass the contract suite limitertest.TestStore.
//
// For a plain Go library user:
//
//	store := limiter.NewMemoryStore(limiter.MemoryOptions{})
//	res, err := limiter.Allow(ctx, store, clientID, limiter.Limit{Requests: 100, Window: time.Minute})
//
// The package does not know descriptors, domains, config files, gRPC, Envoy
// protos or response headers (pkg/descriptors and pkg/rls do), nor Redis
// (pkg/redis implements Store). It imports only the standard library and no
// other Sluice package, so anything may import it and it may import nothing
// of ours: DESIGN.md section 1.
package limiter
