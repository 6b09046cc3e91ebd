// Package ratelimit is Sluice's rate-limit decision, free of any wire
// protocol: Service.Decide takes a Request (a domain and its descriptors)
// and returns a Decision (one Status per descriptor, the overall code, the
// binding limit and Retry-After). Every front end that decides per request
// calls it: pkg/rls for Envoy's envoy.service.ratelimit.v3 (gRPC and /json).
// Envoy's rate limit quota service (pkg/rlqs) decides no request: it reads
// the config in force (Service.Config) and names its shared limits with
// CounterKey.
//
// Decide runs four named stages, one file each:
//
//   - resolve (resolve.go): match each descriptor to a rule of the config in
//     force, apply limit overrides, drop the limits that others replace, skip
//     unlimited and unmatched descriptors;
//   - plan (plan.go): one limiter.Hit per counted descriptor: its counter key
//     (key.go), hits_addend, refund, shadow and quota flags;
//   - apply (apply.go): one Store.Apply call for the whole request, bounded by
//     the caller's context; a store failure is answered by the domain's
//     failure mode;
//   - result (result.go): statuses, the overall code, the binding limit (the
//     one response headers report) and Retry-After, metrics and debug logs.
//
// It imports pkg/descriptors (the config model) and pkg/limiter (the store
// and its algorithms) and no Envoy proto, gRPC or HTTP package, so every
// front end shares one decision (a test checks it).
//
// # Decisions Envoy's protocol leaves open
//
//   - A limit override applies when the domain is known, whether or not a
//     rule matches, and is never in shadow mode (as in envoyproxy/ratelimit).
//     Its counter is identified by the domain, the entries and the window (the
//     store adds the window), not by its requests_per_unit: changing a
//     tenant's override keeps its count, as a reloaded config does.
//   - Shadow-mode limits are counted and reported as OK with their real
//     limit_remaining; front ends leave them out of response headers.
//   - Quota mode: quota descriptors deny only together, decided by the store
//     in the same call (limiter.Hit.Quota), so a quota denial consumes
//     nothing and costs one store call like any other denial.
//   - Hits larger than the limit itself (limiter.Result.ExceedsLimit) can
//     never be admitted; the store answers RetryAfter = one window. The
//     result stage reports the same wait as the descriptor's ResetAfter, so
//     duration_until_reset, the RateLimit header's t and Retry-After all say
//     one window (never "t=0" beside "Retry-After: 60"), limit_remaining is
//     0, and front ends say plainly that no wait helps (Decision.ExceedsLimit).
//   - Envoy sends a concurrency limit's release (is_negative_hits, when
//     the stream ends) for every stream, a denied one too: an admitted
//     acquire hands out a slot token (Decision.SlotToken, in the response's
//     dynamic metadata) and the release sends it back as a last entry keyed
//     SlotTokenKey, stripped before matching (slot.go); a release frees only
//     its token's slots.
//   - How a denied request counts, for a limit whose config says no
//     overdraw: all or nothing by default; Options.Overdraw or
//     Options.CountDenied (envoyproxy/ratelimit's counting) count its hits
//     anyway, never on a pool's class (a shed request consumes nothing).
//   - Metrics label a rule by its rate_limit.name when it has one (names are
//     what operators chose and see in RateLimit-Policy), else by its FullKey
//     without the domain; detailed_metric and value_to_metric still put the
//     entries' values in the label, since they ask for them.
package ratelimit
