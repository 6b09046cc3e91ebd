package settings

import (
	"fmt"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/pkg/rlqs"
)

// RLQSSettings are the flags of the rate limit quota service (pkg/rlqs),
// served on the gRPC listener beside ShouldRateLimit.
type RLQSSettings struct {
	AssignmentTTL time.Duration
	Burst         time.Duration
	Idle          time.Duration
	Unmatched     string
	MaxBuckets    int
	// MaxTotalBuckets and MaxStreams bound the quota service's memory
	// whatever the number of Envoys; MaxStreamsPerConnection keeps one
	// client from taking every stream.
	MaxTotalBuckets         int
	MaxStreams              int
	MaxStreamsPerConnection int
}

// table lists the quota service's flags, appended to the settings table.
func (r *RLQSSettings) table() []setting {
	return []setting{
		{"rlqs-assignment-ttl", "quota streams (RLQS): lifetime of each assignment, whole seconds, longer than Envoy's reporting_interval; an Envoy that stops reporting keeps its share this long", durationText(rlqs.DefaultAssignmentTTL), &r.AssignmentTTL},
		{"rlqs-burst", "quota streams: how much of its share an Envoy may admit at once, as time at the share's rate (the token bucket's max_tokens)", durationText(rlqs.DefaultBurst), &r.Burst},
		{"rlqs-idle", "quota streams: abandon a bucket that reports no request for this long; at least --rlqs-assignment-ttl", durationText(rlqs.DefaultIdleAfter), &r.Idle},
		{"rlqs-unmatched", "quota streams: what a bucket matching no rule is assigned: allow (ALLOW_ALL) or deny (DENY_ALL)", "allow", &r.Unmatched},
		{"rlqs-max-buckets", "quota streams: most buckets tracked per stream; a new one past it replaces the longest idle, else shares its rule's overflow limit, untracked", strconv.Itoa(rlqs.DefaultMaxBuckets), &r.MaxBuckets},
		{"rlqs-max-total-buckets", "quota streams: most buckets tracked by all streams together (about 1.1 KB each); past it as past --rlqs-max-buckets", strconv.Itoa(rlqs.DefaultMaxTotalBuckets), &r.MaxTotalBuckets},
		{"rlqs-max-streams", "quota streams: most streams open at once (about 30 KB each); one past it ends with RESOURCE_EXHAUSTED", strconv.Itoa(rlqs.DefaultMaxStreams), &r.MaxStreams},
		{"rlqs-max-streams-per-connection", "quota streams: most streams open at once on one client connection (an Envoy opens one per rate_limit_quota filter); one past it ends with RESOURCE_EXHAUSTED", strconv.Itoa(rlqs.DefaultMaxStreamsPerConnection), &r.MaxStreamsPerConnection},
	}
}

// validate checks the quota service's flags.
func (r *RLQSSettings) validate() error {
	if r.AssignmentTTL < time.Second || r.AssignmentTTL%time.Second != 0 {
		return fmt.Errorf("--rlqs-assignment-ttl: %v: want whole seconds, at least 1s (Envoy reads only the seconds)", r.AssignmentTTL)
	}
	if r.Burst < time.Millisecond {
		return fmt.Errorf("--rlqs-burst: %v is below the minimum 1ms", r.Burst)
	}
	if r.Idle < time.Second {
		return fmt.Errorf("--rlqs-idle: %v is below the minimum 1s", r.Idle)
	}
	// A bucket forgotten releases its share to the other streams, while
	// its Envoy spends the assignment it holds until that expires.
	if r.Idle < r.AssignmentTTL {
		return fmt.Errorf("--rlqs-idle: %v is shorter than --rlqs-assignment-ttl (%v): a bucket forgotten earlier gives its share to others while its Envoy still spends its assignment", r.Idle, r.AssignmentTTL)
	}
	if _, ok := rlqs.ParseBlanket(r.Unmatched); !ok {
		return fmt.Errorf("--rlqs-unmatched: unknown %q (want allow or deny)", r.Unmatched)
	}
	if r.MaxBuckets < 1 {
		return fmt.Errorf("--rlqs-max-buckets: %d must be at least 1", r.MaxBuckets)
	}
	if r.MaxTotalBuckets < 1 {
		return fmt.Errorf("--rlqs-max-total-buckets: %d must be at least 1", r.MaxTotalBuckets)
	}
	if r.MaxStreams < 1 {
		return fmt.Errorf("--rlqs-max-streams: %d must be at least 1", r.MaxStreams)
	}
	if r.MaxStreamsPerConnection < 1 {
		return fmt.Errorf("--rlqs-max-streams-per-connection: %d must be at least 1", r.MaxStreamsPerConnection)
	}
	return nil
}
