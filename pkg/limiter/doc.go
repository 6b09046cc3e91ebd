// Package limiter is Sluice's proto-free core of the rate-limit decision: the
// types of a request (Limit, Hit, Result), the Store interface that decides a
// request against its counters, the algorithms written in Go (one file each,
// registered in one table, algorithm.go), Evaluate, which decides a request
// with them, MemoryStore, the in-memory Store used when no Redis is
// configured, and OverLimitCache, which answers repeated denials.
//
// One Envoy ShouldRateLimit request becomes one Store.Apply call. Apply is
// all or nothing: a request is admitted only if every enforced (non-shadow)
// hit is, a quota group needing just one of its hits (MarkOverLimit), and
// only an admitted request consumes; shadow hits are counted but never deny;
// hits on the same counter share one increment. Time is in Unix milliseconds
// throughout; windows are aligned to the Unix epoch.
//
// Evaluate is the Go twin of the Redis Lua script in pkg/redis: each
// algorithm is written in float64 in its Lua file's operation order, so
// that a differential test can require both to give the same Results on
// every sequence. Any Store must pass the contract suite limitertest.TestStore.
//
// For a plain Go library user:
//
//	store := limiter.NewMemoryStore(limiter.MemoryOptions{})
//	res, err := limiter.Allow(ctx, store, clientID, limiter.Limit{Requests: 100, Window: time.Minute})
//
// # Adding an algorithm
//
// An algorithm is a registry row, one Go file, one Lua file and tests:
//
//  1. A constant of type Algorithm (the next number; never renumber) and its
//     row in the algorithms table (algorithm.go): its Traits, that is its
//     config spelling, its key code (new, never reused), whether pkg/redis
//     keeps its counter as one packed string, and what it can do: lease,
//     overdraw, count denied hits, take a burst or sub-windows, be shared
//     by pkg/rlqs, count requests in flight, its request cap. Every package that depends on
//     the algorithm reads these instead of naming algorithms: the config
//     builder (its name, its parameters, the lists in its messages),
//     pkg/ratelimit (the overdraw default), pkg/rlqs (what it shares),
//     pkg/redis (keys, leases, the script's algorithm numbers); none of them
//     changes.
//  2. A Go file implementing the algorithm interface on State (say
//     token.go); parameters it needs become Limit fields whose zero value
//     is its default, checked by its validate (Limit.Validate refuses the
//     parameters its Traits do not take).
//  3. A Lua file named like the Go file, pkg/redis/lua/token.lua, with the
//     same functions in the same float64 order (lua/header.lua lists them),
//     ending in register with its config spelling. The script joins every
//     file of lua/ at build time and numbers it from this registry.
//  4. Tests: hand-computed cases and exactness properties beside
//     sliding_test.go's, the algorithm in the contract suite's and the
//     Go<->Lua differential test's random mixes (pkg/redis's diff_test.go
//     reads its stored counter back: a reader for its layout), and a TTL
//     case.
//
// MemoryStore, OverLimitCache, the key layout and the Cluster handling need
// no change: they reach the algorithm through the table. MemoryStore's
// eviction reads report and capacity (what a counter holds against its
// limit when written), so report's remaining must stay at most capacity and
// never shrink while a state is left alone (see the interface;
// TestEvictionReadsOfEveryAlgorithm runs every algorithm in the table); and
// the Lua file's undo must take back exactly its token, since an undo entry
// runs it once per refund (its marker makes a retried refund a no-op); a
// consume that changes more than one place of its state (a refund reaching
// older sub-windows) gives one undo token per place it changed.
//
// # Shared limits
//
// Envoy's rate limit quota service (pkg/rlqs) decides no hit: it divides a
// limit among holders (Envoy streams) in proportion to their demand, and each
// enforces its share by itself. Claim, Share and Divide (share.go) are that
// division, MemoryShares its in-memory store; pkg/redis's Shares runs the
// same rule in Lua (quota.lua), and limitertest.TestShares holds both to
// Divide.
//
// The package does not know descriptors, domains, config files, gRPC, Envoy
// protos or response headers (pkg/descriptors and pkg/rls do), nor Redis
// (pkg/redis implements Store). It imports only the standard library and no
// other Sluice package, so anything may import it and it may import nothing
// of ours.
package limiter
