// Package redis is the limiter.Store on Redis: the sliding window counter as
// one Lua script (sliding_window.lua, embedded), the encoding of counter keys,
// and the grouping of hits by Redis Cluster slot. It is the only package of
// Sluice that imports go-redis (as goredis); it imports pkg/limiter, and
// cmd/server wires it in when a Redis URL is set (DESIGN.md sections 1 and 4).
// It owns no rate-limit policy: what to count and what a denial means are
// pkg/limiter's and pkg/rls's.
//
// # Decisions
//
// One Apply is one script call on a standalone or Sentinel Redis, and on a
// Cluster when all its counters share a slot. The script reads Redis TIME, so
// every Sluice instance shares Redis's clock; it evaluates every hit and
// consumes only if every enforced hit is admitted, exactly as limiter.Evaluate
// does (a differential test holds them together).
//
// Across Cluster slots no script is atomic, so Apply decides the slots one
// after another in ascending slot order and stops at the first that denies;
// then one pipelined round trip refunds the slots that admitted and evaluates
// the rest without consuming. The fixed order means a slot only sees requests
// that every earlier slot admitted, so under contention exactly the binding
// limit is admitted (deciding all slots at once in parallel, one round trip
// per node, was tried first: with 300 concurrent requests on limits of 50 and
// 100 it admitted 13, because each slot's temporary consumption denied
// requests the other slot admitted). The price is one round trip per slot.
// See Store.Apply for the window in which a refund is pending.
//
// # Keys
//
// One hash per counter, fields i (window index), c (current window count) and
// p (previous window count; a missing c or p is 0):
//
//	<prefix>{<algorithm>:<window_ms>:k:<escaped key>}
//	<prefix>{<algorithm>:<window_ms>:h:<hex sha256 of key>}
//
// for example "sluice:{sw:60000:k:...}". The prefix defaults to "sluice:".
// The algorithm is "sw" for the sliding window. The key is limiter.Hit.Key,
// opaque bytes, with "%" written "%25" and "}" written "%7D", so the Cluster
// hash tag (the braces) always holds the whole identity and two identities
// never share a key; an escaped key longer than MaxPlainKey bytes is replaced
// by its SHA-256 digest. Every write sets a TTL of at most two windows (the end
// of the next window), and a counter that drops to zero is deleted, so no key
// outlives its window pair. A denied request writes nothing.
package redis
