package rlqs

import (
	"time"

	"github.com/sluicehq/sluice/pkg/descriptors"
	"github.com/sluicehq/sluice/pkg/limiter"
	"github.com/sluicehq/sluice/pkg/ratelimit"
)

// Demand estimation.
const (
	// minSpan is the shortest time over which reported requests become a
	// rate: a report that follows another sooner (Envoy reports a new
	// bucket at once, then with every other) adds its requests to the next
	// span. Envoy's shortest reporting_interval is 100 ms.
	minSpan = 100 * time.Millisecond
	// newBucketSpan is the span of a new bucket's first report when Envoy
	// gives no longer time_elapsed: the request that created it counts as
	// one second's demand until the next report measures.
	newBucketSpan = time.Second
)

// stream is one Envoy stream's state; only its handler touches it.
type stream struct {
	holder  string // the stream's name in the store
	domain  string // set by the first report
	buckets map[string]*bucket
	groups  map[groupID]*group

	reports    uint64    // reports handled
	lastReport time.Time // when the previous report arrived
	warnedGap  bool      // the reporting interval warning was logged
}

// groupID is a shared limit's identity, as limiter.Claim's.
type groupID struct {
	key    string
	window time.Duration
}

// group is the stream's holding in one shared limit: the claim it makes for
// every bucket of the stream that counts in that limit (several buckets
// when a share_threshold rule makes them share one counter), and the share
// it was given, which the group's buckets split by their demand.
type group struct {
	claim   limiter.Claim // Demand is set at each claim
	buckets int           // buckets of the stream in the group
	share   uint64        // the last share
	rate    float64       // hits/s of its buckets, summed at the last claim
	claimed uint64        // the report in which it last claimed
}

func (g *group) id() groupID { return groupID{g.claim.Key, g.claim.Window} }

// policy is how a bucket is answered.
type policy uint8

const (
	policyUnmatched policy = iota // no rule: Options.Unmatched
	policyAllow                   // unlimited, no limit, shadow mode: ALLOW_ALL
	policyDeny                    // requests_per_unit 0: DENY_ALL
	policyShare                   // a share of the rule's limit
)

// bucket is one bucket id's state in a stream.
type bucket struct {
	cfg    *descriptors.Config // the config its policy was resolved in
	policy policy
	group  *group // for policyShare

	rate      float64   // demand in hits/s, smoothed; -1 before the first span
	pending   uint64    // requests reported since since
	since     time.Time // start of the current span
	seen      time.Time // the last report that held it
	idleSince time.Time // since when its reports hold no request; zero if they do
	report    uint64    // the stream's report that last held it
	abandon   bool      // answered with an AbandonAction: forget it
}

// bind resolves b's policy in cfg from its bucket id and attaches it to
// the group of its shared limit. It returns the claim of a group that b left
// and that no bucket of the stream counts in any more, to release.
func (s *Service) bind(st *stream, b *bucket, cfg *descriptors.Config, dom *descriptors.Domain, id map[string]string) []limiter.Claim {
	entries, rule := Match(cfg, dom.Name, id)
	b.cfg, b.policy = cfg, s.policyOf(rule)
	var g *group
	if b.policy == policyShare {
		gid := groupID{ratelimit.CounterKey(dom.Name, entries, rule), rule.Limit.Window()}
		if g = st.groups[gid]; g == nil {
			g = &group{claim: limiter.Claim{Key: gid.key, Window: gid.window, Holder: st.holder, Hold: s.opts.AssignmentTTL + holdGrace}}
			st.groups[gid] = g
		}
		g.claim.Limit = uint64(rule.Limit.RequestsPerUnit)
	}
	if g == b.group {
		return nil
	}
	if g != nil {
		g.buckets++
	}
	return st.detach(b, g)
}

// detach moves b from its group to g (nil: none) and returns the old
// group's claim if no bucket is left in it.
func (st *stream) detach(b *bucket, g *group) []limiter.Claim {
	old := b.group
	b.group = g
	if old == nil {
		return nil
	}
	if old.buckets--; old.buckets > 0 {
		return nil
	}
	delete(st.groups, old.id())
	return []limiter.Claim{old.claim}
}

// policyOf is how a bucket matching rule (nil: none) is answered.
func (s *Service) policyOf(rule *descriptors.Rule) policy {
	switch {
	case rule == nil:
		return policyUnmatched
	case rule.Unlimited || rule.Limit == nil || rule.ShadowMode || s.opts.ShadowMode:
		return policyAllow
	case rule.Limit.RequestsPerUnit == 0:
		return policyDeny
	}
	return policyShare
}

// observe adds one usage report of b (count requests, allowed and denied)
// at now to its demand. A new bucket's first span is Envoy's time_elapsed,
// or newBucketSpan; a span shorter than minSpan waits for the next report.
// The rate is an average of the last span's and the previous rate, so that
// one uneven interval does not swing the share.
func (b *bucket) observe(count uint64, elapsed time.Duration, now time.Time) {
	if b.seen.IsZero() {
		if elapsed < minSpan {
			elapsed = newBucketSpan
		}
		b.since, b.rate = now.Add(-elapsed), -1
	}
	b.seen = now
	b.pending += count
	if count > 0 {
		b.idleSince = time.Time{}
	} else if b.idleSince.IsZero() {
		b.idleSince = now
	}
	span := now.Sub(b.since)
	if span < minSpan {
		return
	}
	rate := float64(b.pending) / span.Seconds()
	if b.rate >= 0 {
		rate = (b.rate + rate) / 2
	}
	b.rate, b.pending, b.since = rate, 0, now
}

// demandRate is b's demand in hits/s for sharing: its smoothed rate, or
// while it has none yet, what it reported so far over its span.
func (b *bucket) demandRate(now time.Time) float64 {
	if b.rate >= 0 {
		return b.rate
	}
	return float64(b.pending) / max(now.Sub(b.since), minSpan).Seconds()
}
