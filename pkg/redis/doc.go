// Package redis is the limiter.Store on Redis: every algorithm of pkg/limiter
// in one Lua script (limiter.lua, embedded) that dispatches per hit on its
// algorithm, the encoding of counter keys, and the grouping of hits by Redis
// Cluster slot. It is the only package of Sluice that imports go-redis (as
// goredis); it imports pkg/limiter, and cmd/server wires it in when a Redis
// URL is set (DESIGN.md sections 1 and 4).
// It owns no rate-limit policy: what to count and what a denial means are
// pkg/limiter's and pkg/rls's.
//
// # Decisions
//
// One Apply is one script call on a standalone or Sentinel Redis, and on a
// Cluster when all its counters share a slot. The script reads Redis TIME, so
// every Sluice instance shares Redis's clock; it evaluates every hit by its
// algorithm's section and consumes only if the request is admitted (every
// enforced hit, a quota group needing one of its hits), exactly as
// limiter.Evaluate does (a differential test holds them together). A request
// that mixes algorithms is still one call.
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
// See Store.Apply for the window in which a refund is pending, and for a
// quota group spread over several slots, which is decided in Go once every
// slot has admitted.
//
// A refund is the script's mode "u" under a marker key that names it
// (refund.go): the first run sets the marker, a second changes nothing. So a
// refund whose reply is lost to a deadline is retried, in the background,
// until Redis answers it (up to RefundHorizon), and is never applied twice;
// failures are logged at most once per 10 s, with counts. A denial that one
// slot has given is the answer even when another slot cannot be read.
//
// # Shedding load
//
// Every decision goes through a gate per Redis node (gate.go): at most the
// pool's connections are in flight, so go-redis never queues one; a decision
// whose deadline would leave less than a round trip (a moving average of
// measured ones) is not sent but answered at once by an error wrapping
// limiter.ErrStoreUnavailable (so the failure mode answers), and a node that
// answered nothing for 200 ms while a call timed out is sent nothing until it
// answers a PING. What a store cannot take back: a script already sent when
// its node stalls may still run when it resumes, after its caller was
// answered by the failure mode; at most one per pooled connection, since a
// new connection waits for its handshake reply (HELLO) before sending.
//
// # Keys
//
// One key per counter, named by its identity; what it holds is its
// algorithm's (limiter.lua's sections): a sliding window of one sub-window
// a hash with fields i (window index), c (current window count) and p
// (previous window count; a missing c or p is 0); a sliding window of N > 1
// sub-windows, a fixed window and a token bucket one packed string each,
// read with the call's MGET; the logs a sorted set:
//
//	<prefix>{<algorithm>:<window_ms>:k:<escaped key>}
//	<prefix>{<algorithm>:<window_ms>:h:<hex sha256 of key>}
//
// for example "sluice:{swd50:60000:k:...}". The prefix defaults to "sluice:".
// The algorithm is a short code per algorithm (algorithmCode: "sw" for the
// sliding window, "fw", "tb", "sl", "cc"), then "d" for a counter that is one
// packed string (fixed windows, token buckets, and sliding windows of N > 1
// sub-windows, whose N follows: "swd50"; see packedLayout). The key is
// limiter.Hit.Key,
// opaque bytes, with "%" written "%25" and "}" written "%7D", so the Cluster
// hash tag (the braces) always holds the whole identity and two identities
// never share a key; an escaped key longer than MaxPlainKey bytes is replaced
// by its SHA-256 digest. Every write sets a TTL, the time after which the
// state no longer matters: at most two windows for the windows and logs (the
// sliding window: the end of the next window), the moment a token bucket is
// full again (its burst over its rate, or later when hits went beyond its
// burst); a counter that becomes empty is deleted, so no key outlives its
// state. A denied request writes nothing (overdraw hits aside).
//
// # Shared limits
//
// Store.Shares is the store of pkg/rlqs's shared limits (limiter.Claim): one
// hash per limit, <prefix>{rlqs:<window_ms>:k:<escaped key>}, one field per
// holder, each claim one run of quota.lua (the twin of limiter.Divide) under
// Redis TIME, the claims of a report pipelined. The hash expires with its
// latest holding.
package redis
