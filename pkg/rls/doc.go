// Package rls is Sluice's Envoy-facing adapter: it implements
// envoy.service.ratelimit.v3.RateLimitService (ShouldRateLimit) on top of a
// descriptor tree (pkg/descriptors) and a counter store (pkg/limiter).
//
// It owns what Envoy sees: request validation (INVALID_ARGUMENT naming the
// field), hits_addend, descriptor limit overrides, unlimited, replaces,
// shadow mode, quota mode, share_threshold keys, the per-descriptor statuses,
// the response headers (the IETF RateLimit fields, the envoyproxy/ratelimit
// compatible set, Retry-After), the failure mode when the store fails, and
// the HTTP /json twin of the gRPC call. It does not own config loading,
// counters or transport: cmd/server wires listeners and stores.
//
// Imports point one way: cmd/server -> pkg/rls -> {pkg/descriptors,
// pkg/limiter}. Nothing in Sluice imports pkg/rls but cmd/server.
//
// # Counter keys
//
// A descriptor's counter key is the domain and every entry of the request
// descriptor, each length-prefixed, so no two descriptors share a counter
// whatever bytes their values hold. An entry matched by a wildcard rule with
// share_threshold contributes the rule's pattern instead of its value, so
// every matching value shares one counter. A descriptor limit override counts
// in its own counter, marked with the override's rate. The store adds the
// window and the algorithm to the counter's identity.
//
// # Decisions that extend DESIGN.md
//
//   - A limit override applies when the domain is known, whether or not a rule
//     matches, and is never in shadow mode (as in envoyproxy/ratelimit).
//   - Shadow-mode limits are counted and reported in statuses as OK with
//     their real limit_remaining; they never appear in the response headers,
//     since clients must not see a limit that is only being tried out.
//   - Quota mode: quota descriptors never deny on their own; when every quota
//     descriptor of a request is over its limit the request is OVER_LIMIT,
//     and what the request consumed is refunded so a denial still consumes
//     nothing.
package rls
