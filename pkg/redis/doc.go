// Package redis is the limiter.Store on Redis: every algorithm of pkg/limiter
// in one Lua script (lua/, joined at build time and embedded), the wire
// protocol between the Store and the script, the encoding of counter keys,
// and the grouping of hits by Redis Cluster slot. It is the only package of
// Sluice that imports go-redis (as goredis); it imports pkg/limiter, and
// internal/app wires it in when a Redis URL is set. It owns no rate-limit
// policy: what to count and what a denial means are pkg/limiter's and
// pkg/rls's.
//
// # Layers
//
// Each layer reaches the one below through a few methods:
//
//   - store.go composes the others: Store.Apply validates the hits, names
//     their counters (key.go) and hands a request to the leases or to the
//     decider.
//   - lease.go, the hot-key tier, decorates the single-hit path: a hot
//     counter's request is served from permits leased in Redis, or asks for
//     a lease with its decision (the decider's applyHits).
//   - cluster.go's decider groups a request's hits by slot, decides the
//     groups one after another on their nodes, settles a request that one
//     slot denied and fills the Results; refund.go retries its refunds.
//   - node.go is one Redis node: the calls in flight to it (at most
//     Options.CallsInFlight, up to Options.MaxCallsInFlight while the
//     oldest is slow (lanes.go), never more than its connection pool), the
//     decisions that wait meanwhile and share the next call, and gate.go's
//     stall detection and deadline shedding.
//   - protocol.go defines the wire layout once (the entries of a call and
//     its reply, as struct formats) and gives the script the same layout and
//     limiter's registry as a prelude; reply.go reads a reply against it;
//     script.go loads and calls the script.
//
// # Decisions
//
// Concurrent decisions share script calls: one Apply is one entry of a call,
// and a call decides every entry waiting for its node and slot, each all or
// nothing on its own, as if each were its own call at the same instant. The
// script reads Redis TIME, so every Sluice instance shares Redis's clock; it
// evaluates every hit by its algorithm's file and consumes only if the
// request is admitted (every enforced hit, a quota group needing one of its
// hits), exactly as limiter.Evaluate does (a differential test holds them
// together). A request that mixes algorithms is still one entry. An entry
// that raises an error in the script fails alone; the call decides the
// others.
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
// A refund is the script's undo entry under a marker key that names it
// (refund.go): the first run sets the marker, a second changes nothing. So a
// refund whose reply is lost to a deadline is retried, in the background,
// until Redis answers it (up to RefundHorizon), and is never applied twice;
// failures are logged at most once per 10 s, with counts. A denial that one
// slot has given is the answer even when another slot cannot be read.
//
// # Shedding load
//
// A decision is sent only while its deadline is ahead: one whose call has
// not been sent when its deadline passes leaves it and is never sent, one
// whose deadline leaves less than a round trip (a moving average of measured
// ones) beside another call in flight is not sent, and a node that answered
// nothing for 200 ms while a call timed out is sent nothing until it
// answers a PING; each is answered at once by an error wrapping
// limiter.ErrStoreUnavailable (so the failure mode answers). What a store
// cannot take back: a script already sent when its node stalls may still run
// when it resumes, after its caller was answered by the failure mode; at
// most one per call in flight, since a new connection waits for its
// handshake reply (HELLO) before sending.
//
// # Keys
//
// One key per counter, named by its identity; what it holds is its
// algorithm's (its file in lua/): a sliding window of one sub-window a hash
// with fields i (window index), c (current window count) and p (previous
// window count; a missing c or p is 0); a sliding window of N > 1
// sub-windows, a fixed window and a token bucket one packed string each,
// read with the call's MGET; the logs a sorted set:
//
//	<prefix>{<algorithm>:<window_ms>:k:<escaped key>}
//	<prefix>{<algorithm>:<window_ms>:h:<hex sha256 of key>}
//
// for example "sluice:{swd50:60000:k:...}". The prefix defaults to "sluice:".
// The algorithm is its key code in limiter's registry (limiter.Traits.Code:
// "sw" for the sliding window, "fw", "tb", "sl", "cc"), then "d" for a
// counter that is one packed string (limiter.Traits.Packed, and sliding
// windows of N > 1 sub-windows, whose N follows: "swd50"; see packedLayout).
// The key is limiter.Hit.Key, opaque bytes, with "%" written "%25" and "}"
// written "%7D", so the Cluster hash tag (the braces) always holds the whole
// identity and two identities never share a key; an escaped key longer than
// MaxPlainKey bytes is replaced by its SHA-256 digest. Every write sets a
// TTL, the time after which the state no longer matters: at most two
// windows for the windows and logs (the sliding window: the end of the next
// window), the moment a token bucket is full again (its burst over its
// rate, or later when hits went beyond its burst); a counter that becomes
// empty is deleted, so no key outlives its state. A denied request writes
// nothing (overdraw and count-denied hits aside).
//
// # Shared limits
//
// Store.Shares is the store of pkg/rlqs's shared limits (limiter.Claim): one
// hash per limit, <prefix>{rlqs:<window_ms>:k:<escaped key>}, one field per
// holder, each claim one run of quota.lua (the twin of limiter.Divide) under
// Redis TIME, the claims of a report pipelined. The hash expires with its
// latest holding.
package redis
