// Package rlqs is Sluice's front end for Envoy's rate limit quota service,
// envoy.service.rate_limit_quota.v3.RateLimitQuotaService
// (StreamRateLimitQuotas), on the same config and store as ShouldRateLimit
// (pkg/rls). Each Envoy keeps a stream open, reports per bucket how many
// requests it allowed and denied, and enforces by itself whatever it is
// assigned: no request waits on Sluice. The service matches each bucket to a
// descriptor rule, divides the rule's limit among the streams reporting it
// in proportion to their demand, through a Store that every Sluice instance
// shares, and assigns each stream its share as a token bucket.
//
// It owns the protocol (checking reports, building actions), the mapping of
// bucket ids to rules (Match) and each stream's state. It does not own
// matching itself (pkg/descriptors), counter keys (pkg/ratelimit) or the
// division of a limit (limiter.Divide, in memory and in pkg/redis). Imports
// point one way: internal/app -> pkg/rlqs -> pkg/ratelimit -> {pkg/descriptors,
// pkg/limiter}.
//
// # Decisions
//
//   - A bucket id is a map; a descriptor is ordered. The domain's descriptor
//     tree gives the order (Match): from the top level, the first rule in
//     config order whose key is in the bucket id and whose entry matches,
//     then among its children with the keys left, backing up when a path
//     runs out. The bucket then matches as the descriptor with those entries
//     in that order: so one config serves both protocols, and a bucket
//     {api_key: alice, route: search} counts under the api_key > route rule.
//     As for descriptors, the rule must be exactly as deep as the bucket has
//     keys.
//   - How a bucket is answered: a rule with a limit is shared (below); an
//     unlimited rule, a rule without rate_limit (a whitelist), a rule in
//     shadow mode and a rule whose only limit is a concurrency one (requests
//     in flight, which Envoy does not report) get ALLOW_ALL; a limit of
//     requests_per_unit 0 gets DENY_ALL; a bucket
//     matching no rule gets Options.Unmatched (--rlqs-unmatched), ALLOW_ALL
//     unless set to deny, as ShouldRateLimit answers OK to a descriptor
//     without a rule. A domain no config has ends the stream: it is Envoy's
//     config that names it.
//   - Sharing: each stream is one holder of each limit its buckets count in
//     (the limit is named by the rule's counter key and window, so buckets
//     that a share_threshold wildcard counts together share one limit, and
//     one stream holds it once for all of them). A holder's demand is the
//     requests its buckets report, allowed and denied, per second, averaged
//     over the last two reports, times the window. limiter.Divide gives each
//     holder its demand plus an equal part of the headroom when the fleet's
//     demand is under the limit (one more part kept free, so that the next
//     stream to join gets a share at once; streams joining right after it
//     get what is free, possibly nothing, until the others report again),
//     and its proportional part above it, keeps a
//     share that is within 10% of that (so Envoy keeps its token bucket),
//     and never lets the shares add up to more than the limit: a holder
//     that should grow gets what the others free at their next reports. A
//     stream's buckets of one limit split its share by their demand, each
//     bounded by what the live assignments of the others leave (Envoy
//     enforces an assignment until it expires, and reports a new bucket
//     alone): a new bucket gets a part of what is free, possibly nothing,
//     until the next report holding them all rebalances. The stream's claim
//     keeps (limiter.Claim.Keep) what the live assignments of its buckets
//     not in the report admit, so its share never drops below them and the
//     live assignments of all streams add up to at most the limit.
//   - The assignment is a token bucket: share tokens per window (Envoy
//     refills continuously, at share/window per second), holding share x
//     Options.Burst / window (--rlqs-burst), at least 1; for a token_bucket
//     limit, the same part of its burst. A rule with several limits
//     (rate_limits; each shared on its own) is one token bucket at the rate
//     of its slowest part with the smallest capacity, so it keeps every
//     limit's bound; give RLQS clients bursts with a token_bucket limit's
//     burst. Envoy implements no
//     requests_per_time_unit strategy, so none is sent. A share of 0 is
//     DENY_ALL (Envoy requires max_tokens >= 1). TTL and fill interval are
//     whole seconds: Envoy reads only the seconds of both.
//   - What the fleet admits: since shares add up to at most the limit and
//     each Envoy's bucket admits at most max_tokens plus share/window per
//     second, the fleet admits in one window at most the limit plus the sum
//     of max_tokens (about limit x burst / window, plus one per Envoy), plus
//     one max_tokens per share change in the window, since Envoy starts a
//     new assignment's token bucket full.
//   - A stream that stops reporting keeps its share for the assignment TTL
//     (--rlqs-assignment-ttl) plus half a second, as long as its Envoy
//     enforces it, then the others get it; a stream that ends releases its
//     shares at once. A bucket reported without requests for
//     Options.IdleAfter (--rlqs-idle) is abandoned (AbandonAction): Envoy
//     forgets it and subscribes again on its next request. A bucket no
//     longer reported at all is forgotten after as long.
//   - Errors: what no Envoy sends (no domain in the first report, another
//     domain later, a bucket id without keys, an empty or overlong key,
//     more keys than a descriptor may have entries, more than 2^40 requests
//     in one report, a negative or invalid time_elapsed) ends the stream
//     with INVALID_ARGUMENT naming the field, and changes nothing; no config
//     loaded ends it with UNAVAILABLE. A store failure ends nothing: the
//     domain's failure mode answers the shared buckets of that report
//     (allow: ALLOW_ALL, deny: DENY_ALL, error: no action, so Envoy keeps
//     its assignment until it expires and then applies its own
//     expired_assignment_behavior). A stream opened when Options.MaxStreams
//     (--rlqs-max-streams) are open, or Options.MaxStreamsPerConnection
//     (--rlqs-max-streams-per-connection) on its client connection, ends at
//     once with RESOURCE_EXHAUSTED naming the setting; other connections'
//     streams are unaffected.
//   - Bounds on buckets: a new bucket past Options.MaxBuckets
//     (--rlqs-max-buckets) of its stream, or Options.MaxTotalBuckets
//     (--rlqs-max-total-buckets) of all streams, takes the place of the
//     stream's bucket idle the longest (reported without requests, and
//     abandoned; or not reported for the assignment TTL); when none is, it
//     is answered, untracked, from its rule's overflow limit: one limit per
//     rule that the rule's buckets past a bound share through the store,
//     each assigned its stream's whole share when each counts on a counter
//     of its own, else a part. Never by the failure mode, and never with
//     nothing: bucket ids may hold values end clients choose, and a bucket
//     left unanswered gets Envoy's no_assignment_behavior, so a client that
//     filled the bounds would leave every new tenant unlimited. Past
//     MaxTotalBuckets, the other streams evict their idle buckets at their
//     next reports, so that the new bucket is tracked at its own. With the
//     bounds the service's memory is bounded (about 1.1 KB a bucket, 30 KB
//     a stream).
//   - The two protocols share config and store, not counters: a bucket and
//     a ShouldRateLimit descriptor matching the same rule each get the whole
//     limit. Give each protocol its own rules (or domain) when both run.
//
// Envoy's side (examples/envoy/envoy-rlqs.yaml): set
// reporting_interval well under the assignment TTL, and a
// no_assignment_behavior and expired_assignment_behavior that fit your
// failure mode: a bucket is allowed everything until its first assignment
// unless told otherwise, and without expired_assignment_behavior an
// assignment that expires (Sluice unreachable) abandons the bucket.
package rlqs
