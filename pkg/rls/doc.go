// Package rls is Sluice's front end for Envoy's rate limit service,
// envoy.service.ratelimit.v3.RateLimitService (ShouldRateLimit), and its HTTP
// twin /json. It is a thin adapter on the proto-free decision of
// pkg/ratelimit: it validates what Envoy's config shapes (INVALID_ARGUMENT
// naming the field), converts the RateLimitRequest into a ratelimit.Request,
// and renders the ratelimit.Decision as Envoy's RateLimitResponse: one
// status per descriptor, the response headers (the IETF RateLimit fields, the
// envoyproxy/ratelimit compatible set, Retry-After), the raw body and the
// dynamic metadata. It maps the decision's errors to gRPC codes in one
// function (grpcError). It also owns the gRPC codec that accepts strings
// that are not UTF-8 (Codec).
//
// It does not own matching, counting, failure modes or metrics of decisions
// (pkg/ratelimit), config loading (pkg/descriptors) or transport
// (internal/app). Imports point one way: internal/app -> pkg/rls ->
// pkg/ratelimit -> {pkg/descriptors, pkg/limiter}.
//
// # Decisions Envoy's protocol leaves open
//
//   - Shadow-mode limits are reported in statuses as OK with their real
//     limit_remaining, and never appear in the response headers, since
//     clients must not see a limit that is only being tried out.
//   - When the failure mode answers, statuses carry current_limit but no
//     limit_remaining or duration_until_reset (the store's state is
//     unknown), and a denial says Retry-After: 1.
package rls
