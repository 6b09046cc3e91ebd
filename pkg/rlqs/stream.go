package rlqs

import (
	"cmp"
	"slices"
	"strconv"
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
	holder  string      // the stream's name in the store
	domain  string      // set by the first report
	conn    *connection // the client connection it is open on; nil if untagged
	buckets map[string]*bucket
	groups  map[groupID]*group
	// overflow are the groups that buckets past a bound were answered
	// from (overflow.go), kept while what they handed out is live.
	overflow map[groupID]*group

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
	burst   uint64        // a token_bucket limit's burst (capacity), else 0
	buckets int           // buckets of the stream in the group
	share   uint64        // the last share
	rate    float64       // hits/s of its buckets, summed at the last claim
	claimed uint64        // the report in which it last claimed
	members []*bucket     // the buckets counted in buckets

	// For buckets past a bound (overflow.go): perValue marks a group whose
	// buckets past a bound each count on a counter of their own, so each is
	// assigned the whole share; overN counts those of the report being
	// answered; handed is what they were assigned, one entry per report.
	perValue bool
	overN    int
	handed   []heldPart
}

// heldPart is one bucket's last assigned part of a group's share, live in
// Envoy until it expires.
type heldPart struct {
	fill    uint64 // hits per window
	report  uint64 // the stream's report that assigned it
	expires int64  // Unix ns when Envoy drops it
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
	groups []*group   // for policyShare: one per limit of its rule
	held   []heldPart // its last assigned part of each of groups

	rate      float64   // demand in hits/s, smoothed; -1 before the first span
	pending   uint64    // requests reported since since
	since     time.Time // start of the current span
	seen      time.Time // the last report that held it
	idleSince time.Time // since when its reports hold no request; zero if they do
	report    uint64    // the stream's report that last held it
	abandon   bool      // answered with an AbandonAction: forget it
	over      bool      // past a bound: untracked, answered from overflow groups for one report
}

// bind resolves b's policy in cfg from its bucket id and attaches it to the
// groups of its rule's shared limits, one per limit whose algorithm can be
// shared (descriptors.Limit.Shares: a concurrency limit counts requests in
// flight, which Envoy does not report, and a calendar quota's periods are
// not windows a share can be granted for, so neither has one). It
// returns the claims of the groups b left that no bucket of the stream
// counts in any more, to release.
func (s *Service) bind(st *stream, b *bucket, cfg *descriptors.Config, dom *descriptors.Domain, id map[string]string) []limiter.Claim {
	entries, rule := Match(cfg, dom.Name, id)
	b.cfg, b.policy = cfg, s.policyOf(rule)
	var gs []*group
	if b.policy == policyShare {
		key := ratelimit.CounterKey(dom.Name, entries, rule)
		for _, l := range rule.Limits {
			if l.Shares() {
				gs = append(gs, s.groupOf(st, key, "", l))
			}
		}
	}
	return st.regroup(b, gs)
}

// groupOf is the stream's group of limit l of the rule whose buckets count
// under key, made if new. The group's identity is key, l's algorithm (a
// rule's limits differ by window or algorithm) and suffix, then l's
// window; its limit and burst follow the config in force.
func (s *Service) groupOf(st *stream, key, suffix string, l *descriptors.Limit) *group {
	gid := groupID{key + "\x00" + strconv.Itoa(int(l.Algorithm)) + suffix, l.Window()}
	g := st.groups[gid]
	if g == nil {
		g = &group{claim: limiter.Claim{Key: gid.key, Window: gid.window, Holder: st.holder, Hold: s.opts.AssignmentTTL + holdGrace}}
		st.groups[gid] = g
	}
	g.claim.Limit, g.burst = uint64(l.RequestsPerUnit), 0
	if l.Algorithm.Traits().Burst {
		g.burst = uint64(cmp.Or(l.Burst, l.RequestsPerUnit))
	}
	return g
}

// regroup moves b from its groups to gs and returns the claims of the
// groups it left that no bucket of the stream counts in any more.
func (st *stream) regroup(b *bucket, gs []*group) []limiter.Claim {
	for _, g := range gs {
		if !slices.Contains(b.groups, g) {
			g.buckets++
			g.members = append(g.members, b)
		}
	}
	var release []limiter.Claim
	for _, old := range b.groups {
		if slices.Contains(gs, old) {
			continue
		}
		if i := slices.Index(old.members, b); i >= 0 {
			old.members = slices.Delete(old.members, i, i+1)
		}
		if old.buckets--; old.buckets == 0 && len(old.handed) == 0 {
			delete(st.groups, old.id())
			release = append(release, old.claim)
		}
	}
	b.groups, b.held = gs, make([]heldPart, len(gs))
	return release
}

// policyOf is how a bucket matching rule (nil: none) is answered.
func (s *Service) policyOf(rule *descriptors.Rule) policy {
	switch {
	case rule == nil:
		return policyUnmatched
	case rule.Unlimited || rule.Limit == nil || rule.ShadowMode || s.opts.ShadowMode:
		return policyAllow
	}
	shared := false
	for _, l := range rule.Limits {
		if l.RequestsPerUnit == 0 {
			return policyDeny
		}
		shared = shared || l.Shares()
	}
	if !shared {
		return policyAllow // requests in flight only: nothing Envoy can enforce
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
